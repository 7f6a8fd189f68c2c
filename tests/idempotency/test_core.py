"""The core on its own: fingerprints, header forms, fencing, recovery points."""

import json
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from idempotency import core, phases
from idempotency.core import KeyRequest, fingerprint
from idempotency.drf import parse_idempotency_key
from idempotency.errors import (
    IdempotencyKeyInUse,
    IdempotencyKeyInvalid,
    IdempotencyKeyMissing,
    UnknownRecoveryPoint,
)
from idempotency.models import IdempotencyKey, RecoveryPoint
from idempotency.phases import MoveTo, Respond, atomic_phase
from orders.flows import order_create_flow
from orders.models import Order
from orders.services import LineRequest

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
bodies = st.dictionaries(st.text(max_size=6), json_values, max_size=5)


def reordered(value):
    """The same JSON value with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {key: reordered(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reordered(item) for item in value]
    return value


@given(body=bodies, indent=st.sampled_from([None, 1, 4]))
def test_fingerprint_is_stable_under_key_order_and_whitespace(body, indent):
    # The client may serialize the same body with other key order and whitespace.
    resent = json.loads(json.dumps(reordered(body), indent=indent))

    assert fingerprint(method="POST", path="/p/", body=resent) == fingerprint(
        method="POST", path="/p/", body=body
    )


@given(body=bodies, key=st.text(max_size=6), value=json_values)
def test_fingerprint_changes_with_any_value(body, key, value):
    changed = {**body, key: value}
    if core.canonical_json(changed) == core.canonical_json(body):
        return  # the "change" wrote the same value back: not a change
    assert fingerprint(method="POST", path="/p/", body=changed) != fingerprint(
        method="POST", path="/p/", body=body
    )


def test_fingerprint_covers_method_and_route():
    base = fingerprint(method="POST", path="/api/v1/orders/", body={})

    assert fingerprint(method="PUT", path="/api/v1/orders/", body={}) != base
    assert fingerprint(method="POST", path="/api/v1/orders/X/pay/", body={}) != base


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("abc", "abc"),
        ('"abc"', "abc"),
        ("  spaced-ows  ", "spaced-ows"),
        ("A-Z_a.z:0~9", "A-Z_a.z:0~9"),
        ("k" * 255, "k" * 255),
        ('"' + "k" * 255 + '"', "k" * 255),
    ],
)
def test_header_accepts_bare_token_and_sf_string(raw, key):
    assert parse_idempotency_key(raw) == key


def test_header_missing_and_invalid_are_distinct():
    with pytest.raises(IdempotencyKeyMissing):
        parse_idempotency_key(None)
    with pytest.raises(IdempotencyKeyInvalid):
        parse_idempotency_key('""')


@pytest.mark.django_db
def test_a_request_taken_over_cannot_commit_anything(user, product, settings):
    # Given request A holding a committed record at STARTED
    request = KeyRequest(user_id=user.pk, key="k", method="POST", path="/p/", body={})
    planted = IdempotencyKey.objects.create(
        user=user,
        key="k",
        fingerprint=request.fingerprint,
        method="POST",
        path="/p/",
        created_at=timezone.now(),
    )
    record_a = core._acquire(request, request.fingerprint)
    # and request B taking it over because A looked dead
    settings.IDEMPOTENCY_LOCK_TIMEOUT = 0
    IdempotencyKey.objects.filter(pk=planted.pk).update(
        locked_at=timezone.now() - timedelta(seconds=1)
    )
    record_b = core._acquire(request, request.fingerprint)
    assert record_b.lock_token != record_a.lock_token

    # When A tries to commit its phase
    with pytest.raises(phases.LockLost):
        order_create_flow(
            record_a, user_id=user.pk, lines=[LineRequest(sku=product.sku, quantity=1)]
        )

    # Then nothing of A's work is in the database
    assert Order.objects.count() == 0
    assert IdempotencyKey.objects.get(pk=planted.pk).lock_token == record_b.lock_token


@pytest.mark.django_db
def test_taken_over_request_answers_409_in_use(user, settings):
    request = KeyRequest(user_id=user.pk, key="k", method="POST", path="/p/", body={})

    def flow(record):
        # Between our acquire and our commit, a retry takes the record over.
        IdempotencyKey.objects.filter(pk=record.pk).update(lock_token=uuid.uuid4())
        atomic_phase(record, lambda: Respond(status=200, body={}))

    IdempotencyKey.objects.create(
        user=user,
        key="k",
        fingerprint=request.fingerprint,
        method="POST",
        path="/p/",
        created_at=timezone.now(),
    )
    with pytest.raises(IdempotencyKeyInUse):
        core.execute(request, flow)


@pytest.mark.django_db
def test_move_to_commits_the_recovery_point_and_keeps_the_lock(user):
    request = KeyRequest(user_id=user.pk, key="k", method="POST", path="/p/", body={})
    record = core._acquire(request, request.fingerprint)

    atomic_phase(record, lambda: MoveTo("payment_created"))

    stored = IdempotencyKey.objects.get(pk=record.pk)
    assert stored.recovery_point == "payment_created"
    assert stored.lock_token == record.lock_token


@pytest.mark.django_db
def test_a_failed_later_phase_releases_the_lock_and_keeps_the_point(user):
    request = KeyRequest(user_id=user.pk, key="k", method="POST", path="/p/", body={})

    def flow(record):
        atomic_phase(record, lambda: MoveTo("payment_created"))
        raise RuntimeError("provider call crashed")

    with pytest.raises(RuntimeError):
        core.execute(request, flow)

    stored = IdempotencyKey.objects.get(key="k")
    assert stored.recovery_point == "payment_created"
    assert stored.lock_token is None  # a retry may resume at once


@pytest.mark.django_db
def test_unknown_recovery_point_raises(user, product):
    record = IdempotencyKey(user=user, key="k", recovery_point="teleported")

    with pytest.raises(UnknownRecoveryPoint):
        order_create_flow(record, user_id=user.pk, lines=[LineRequest(product.sku, 1)])


@pytest.mark.django_db
def test_finished_record_is_returned_as_is_for_replay(user):
    request = KeyRequest(user_id=user.pk, key="k", method="POST", path="/p/", body={})
    core.execute(
        request, lambda record: atomic_phase(record, lambda: Respond(status=201, body={"ok": 1}))
    )

    replay = core.execute(request, lambda record: pytest.fail("must not run again"))

    assert (replay.status, replay.body, replay.replayed) == (201, {"ok": 1}, True)
    assert IdempotencyKey.objects.get().recovery_point == RecoveryPoint.FINISHED


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_that_loses_on_the_order_index_replays_the_first(user, product):
    # A single-phase flow inserts its record last, with its answer: a duplicate that
    # looked the key up before the first committed meets the first's order on the
    # unique (user, key) index of orders, not the first's record.
    request = KeyRequest(user_id=user.pk, key="k", method="POST", path="/p/", body={})
    lines = [LineRequest(sku=product.sku, quantity=1)]
    runs: list[core.Outcome] = []

    def flow(record):
        if not runs:
            # Given the first request committing between our lookup and our work
            runs.append(
                core.execute(
                    request, lambda first: order_create_flow(first, user_id=user.pk, lines=lines)
                )
            )
        order_create_flow(record, user_id=user.pk, lines=lines)

    # When our work fails on the order's unique index
    outcome = core.execute(request, flow)

    # Then we answer the first request's stored result, and one order exists
    assert outcome.replayed
    assert (outcome.status, outcome.body_text) == (runs[0].status, runs[0].body_text)
    assert Order.objects.count() == 1
    assert IdempotencyKey.objects.filter(key="k").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_single_phase_record_is_written_once_finished_with_its_answer(user):
    request = KeyRequest(user_id=user.pk, key="k", method="POST", path="/p/", body={})
    seen_during_work = []

    def flow(record):
        def work():
            seen_during_work.append(IdempotencyKey.objects.filter(key="k").exists())
            return Respond(status=201, body={"ok": 1})

        phases.single_phase(record, work)

    outcome = core.execute(request, flow)

    assert seen_during_work == [False]  # nothing inserted before the work
    stored = IdempotencyKey.objects.get(key="k")
    assert stored.recovery_point == RecoveryPoint.FINISHED
    assert stored.response_body == outcome.body_text == '{"ok":1}'
    assert stored.lock_token is None
