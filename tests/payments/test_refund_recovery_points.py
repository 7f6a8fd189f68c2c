"""One test per recovery point of the refund flow, and a crash after each phase.

A record planted at each point (as a crashed request leaves it) resumes; a crash
injected after each phase, by exception or by killing the process, is followed
by a retry with the same key, or by the reconciler and the completer, and ends
with one refund at the provider and one in the books.
"""

import pytest
from django.db import connection

from idempotency.models import IdempotencyKey
from payments.models import LedgerEntry, Refund
from payments.providers import get_provider
from payments.refund_flows import RefundPoint
from payments.refunds import refund_create, refund_mark_unknown, refund_send
from reconcile.recovery import unsettled_refunds as reconcile_refunds
from tests.assertions import assert_refunded_once
from tests.conftest import new_key
from tests.factories import key_record_plant
from tests.injection import crash_on
from tests.processes import post_and_die

pytestmark = pytest.mark.django_db(transaction=True)


def plant(user, order, *, point: str, refund: Refund | None = None) -> str:
    """A record as a refund request that died at ``point`` (lock released) leaves it."""
    return key_record_plant(
        user,
        path=f"/api/v1/orders/{order.number}/refunds/",
        point=point,
        resource_type="refund" if refund else "",
        resource_id=refund.pk if refund else None,
    )


def start_refund(user, order) -> Refund:
    return refund_create(
        user_id=user.pk, is_staff=False, order_number=order.number, amount=None, reason=""
    )


def test_resumes_from_started(refund, paid_order, user, wallet):
    key = plant(user, paid_order, point=RefundPoint.STARTED)

    assert refund(key).status_code == 200
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


def test_resumes_from_refund_created_with_a_pending_attempt(refund, paid_order, user, wallet):
    attempt = start_refund(user, paid_order)
    key = plant(user, paid_order, point=RefundPoint.REFUND_CREATED, refund=attempt)

    assert refund(key).status_code == 200
    assert Refund.objects.count() == 1
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


def test_resumes_from_refund_created_when_the_provider_already_refunded(
    refund, paid_order, user, wallet
):
    # Given an attempt the provider refunded but whose answer we never got
    attempt = start_refund(user, paid_order)
    refund_mark_unknown(refund_attempt_id=attempt.pk)
    refund_send(refund=attempt, provider=get_provider())
    key = plant(user, paid_order, point=RefundPoint.REFUND_CREATED, refund=attempt)

    # When the client retries: the flow asks before refunding
    assert refund(key).status_code == 200

    # Then the first refund is the only one
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


# --- Crashes by exception ------------------------------------------------------------

CRASH_POINTS = {
    # phase one committed, provider not asked yet: reading the attempt back fails
    "after refund_created": ('SELECT "payments_refund"', 0),
    # provider refunded, phase two's first write fails and rolls back
    "after the provider refunded": ('UPDATE "payments_refund"', 1),
}


@pytest.mark.parametrize(("sql", "refunded"), CRASH_POINTS.values(), ids=CRASH_POINTS.keys())
def test_an_exception_after_each_phase_then_the_same_key_refunds_once(
    refund, paid_order, user, wallet, sql, refunded
):
    key = new_key()
    with connection.execute_wrapper(crash_on(sql)):
        crashed = refund(key)

    assert crashed.status_code == 500
    assert IdempotencyKey.objects.get(key=key).recovery_point == RefundPoint.REFUND_CREATED
    assert Refund.objects.get().status == "PENDING"
    assert not LedgerEntry.objects.filter(kind="refund").exists()
    assert wallet(user)["refunded_total"] == refunded * paid_order.amount
    assert refund(key).status_code == 200  # same derived provider key: a replay there
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


@pytest.mark.parametrize(("sql", "refunded"), CRASH_POINTS.values(), ids=CRASH_POINTS.keys())
def test_an_exception_after_each_phase_then_the_reconciler_and_completer_finish_it(
    refund, paid_order, user, wallet, settings, sql, refunded
):
    key = new_key()
    with connection.execute_wrapper(crash_on(sql)):
        assert refund(key).status_code == 500
    settings.RECONCILE_AFTER_S = 0

    # The client never comes back: the reconciler settles the refund (query, or send
    # it again with the same derived key) and the completer finishes the request.
    counts = reconcile_refunds.run_once()

    assert (counts.claimed, counts.refunded, counts.completed) == (1, 1, 1)
    replay = refund(key)
    assert (replay.status_code, replay["Idempotent-Replayed"]) == (200, "true")
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


# --- Crashes by killing the process ------------------------------------------------


def kill_during_refund(*, user, order, key: str, after_sql: str, settings):
    """Refund in a child process that dies (exit 137) right after ``after_sql`` runs."""
    path = f"/api/v1/orders/{order.number}/refunds/"
    return post_and_die(user=user, path=path, key=key, after_sql=after_sql, settings=settings)


@pytest.mark.parametrize(("sql", "refunded"), CRASH_POINTS.values(), ids=CRASH_POINTS.keys())
def test_a_killed_process_then_the_same_key_refunds_once(
    refund, paid_order, user, wallet, settings, sql, refunded
):
    key = new_key()

    child = kill_during_refund(
        user=user, order=paid_order, key=key, after_sql=sql, settings=settings
    )

    assert child.returncode == 137, child.stderr
    assert IdempotencyKey.objects.get(key=key).recovery_point == RefundPoint.REFUND_CREATED
    assert Refund.objects.get().status == "PENDING"
    assert wallet(user)["refunded_total"] == refunded * paid_order.amount
    # The dead request still holds the lock: the retry waits for it to go stale.
    assert refund(key).status_code == 409
    settings.IDEMPOTENCY_LOCK_TIMEOUT = 0
    assert refund(key).status_code == 200
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)
