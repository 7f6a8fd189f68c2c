"""Replays answered by the fast path (``fastpaths/replay.py``), before the view.

Every replay row of the behaviour matrix, counted: a token request's replay
costs one statement to PostgreSQL and one round trip to Redis (the throttle),
and says exactly what the first answer said, and what the normal path (the view
and the core) says for it. Whatever is not a finished replay goes on to the view
and keeps its own row's answer.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.middleware.csrf import CSRF_SECRET_LENGTH
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.crypto import get_random_string

from edge.throttling import UserRateThrottle
from fastpaths.records import token_and_record_find
from idempotency import records
from idempotency.core import fingerprint
from idempotency.models import IdempotencyKey
from orders.models import Order
from tests.conftest import client_for, new_key
from tests.factories import DEFAULT_PASSWORD
from tests.processes import session_ended_before

pytestmark = pytest.mark.django_db

ORDERS = "/api/v1/orders/"
FAST_PATH = "fastpaths.replay.ReplayMiddleware"
# A live lock goes on to the core: the fast path's read (reused by the core), the
# core's lock UPDATE that finds it held, and its re-read of the record.
STATEMENTS_OF_A_LIVE_LOCK = 3
# Headers that differ between any two answers, whatever they say.
PER_ANSWER = {"idempotent-replayed", "x-request-id", "date"}


class RoundTrips:
    """Redis round trips of this process: each command sent alone, each pipeline sent."""

    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def redis_round_trips(monkeypatch: pytest.MonkeyPatch) -> RoundTrips:
    """Counts what really goes to the real Redis (nothing is faked: each call goes on)."""
    trips = RoundTrips()
    command, execute = redis.Redis.execute_command, redis.client.Pipeline.execute

    def counted_command(self: Any, *args: Any, **options: Any) -> Any:
        if not isinstance(self, redis.client.Pipeline):  # a pipeline only buffers it
            trips.count += 1
        return command(self, *args, **options)

    def counted_execute(self: Any, *args: Any, **options: Any) -> Any:
        trips.count += 1
        return execute(self, *args, **options)

    monkeypatch.setattr(redis.Redis, "execute_command", counted_command)
    monkeypatch.setattr(redis.client.Pipeline, "execute", counted_execute)
    return trips


@pytest.fixture
def counted(redis_round_trips: RoundTrips) -> Callable[[Callable[[], Any]], tuple[Any, int, int]]:
    """``counted(request)``: its answer, its statements and its Redis round trips."""

    def run(send: Callable[[], Any]) -> tuple[Any, int, int]:
        before = redis_round_trips.count
        with CaptureQueriesContext(connection) as queries:
            response = send()
        return response, len(queries), redis_round_trips.count - before

    return run


def _comparable(response: Any) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.lower() not in PER_ANSWER}


def test_a_replay_is_one_statement_and_one_redis_round_trip(create_order, counted):
    key = new_key()
    first = create_order(key=key)

    replay, statements, trips = counted(lambda: create_order(key=key))

    assert (statements, trips) == (1, 1)
    assert replay.status_code == first.status_code == 201
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.content == first.content
    assert _comparable(replay) == _comparable(first)  # Location, Content-Type, Allow, Vary...


def test_a_stored_business_error_is_replayed_in_one_statement(create_order, product, counted):
    key = new_key()
    first = create_order(key=key, quantity=product.stock + 1)

    replay, statements, trips = counted(lambda: create_order(key=key, quantity=product.stock + 1))

    assert (statements, trips) == (1, 1)
    assert (first.status_code, replay.status_code) == (409, 409)
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.content == first.content
    assert _comparable(replay) == _comparable(first)


@pytest.mark.parametrize("over_stock", [False, True], ids=["created", "business-error"])
def test_the_fast_path_answers_what_the_view_and_the_core_answer(
    create_order, product, user, settings, counted, over_stock
):
    key, quantity = new_key(), product.stock + 1 if over_stock else 1
    first = create_order(key=key, quantity=quantity)  # (this client's middleware is loaded)
    settings.MIDDLEWARE = [name for name in settings.MIDDLEWARE if name != FAST_PATH]
    normal_path = client_for(user)  # a server without the fast path

    fast, fast_statements, _ = counted(lambda: create_order(key=key, quantity=quantity))
    normal, normal_statements, _ = counted(
        lambda: create_order(key=key, quantity=quantity, api=normal_path)
    )

    assert fast_statements == 1 < normal_statements  # each went its own way
    for replay in (fast, normal):
        assert replay.status_code == first.status_code
        assert replay["Idempotent-Replayed"] == "true"
        assert replay.content == first.content
        assert _comparable(replay) == _comparable(first)


def test_a_replay_that_accepts_no_json_is_the_views_406(create_order, client, product):
    key = new_key()
    create_order(key=key)

    response = client.post(
        ORDERS,
        {"lines": [{"sku": product.sku, "quantity": 1}]},
        format="json",
        headers={"Idempotency-Key": key, "Accept": "text/html"},
    )

    assert response.status_code == 406
    assert b"number" not in response.content


def test_a_live_lock_goes_on_to_the_core_which_answers_409_with_retry_after(
    create_order, user, product, settings, counted
):
    settings.PROVIDER_TIMEOUT_S, settings.IDEMPOTENCY_LOCK_TIMEOUT = 5.0, 60
    # Given a request holding the key's lock, taken 10 s ago
    key, body = new_key(), {"lines": [{"sku": product.sku, "quantity": 1}]}
    locked_at = timezone.now() - timedelta(seconds=10)
    IdempotencyKey.objects.create(
        user=user,
        key=key,
        fingerprint=fingerprint(method="POST", path=ORDERS, body=body),
        method="POST",
        path=ORDERS,
        lock_token=uuid.uuid4(),
        locked_at=locked_at,
        created_at=locked_at,
    )

    response, statements, trips = counted(lambda: create_order(key=key))

    assert (statements, trips) == (STATEMENTS_OF_A_LIVE_LOCK, 1)
    assert response.status_code == 409
    assert response.json()["code"] == "idempotency-key-in-use"
    assert response["Retry-After"] == "50"
    assert response["Idempotent-Replayed"] == "false"
    assert IdempotencyKey.objects.get(key=key).lock_token is not None  # not taken
    assert Order.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_session_lost_under_the_fast_paths_read_is_the_views_503(create_order):
    key = new_key()
    create_order(key=key)
    # Just before the fast path's joined read, this request's server session ends.
    with session_ended_before('SELECT t."key"') as ended:
        lost = create_order(key=key)
    # What Django does after every request (its test client leaves it out): the broken
    # connection is closed, and the retry opens a new one.
    connection.close_if_unusable_or_obsolete()
    retried = create_order(key=key)

    assert ended
    # The fast path refuses nothing itself: the view met the same loss, and answered it
    assert (lost.status_code, lost["Content-Type"]) == (503, "application/problem+json")
    assert lost["Retry-After"]
    assert retried.status_code == 201
    assert retried["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1


def test_a_stale_lock_goes_on_to_the_core_which_takes_it_over(create_order, user, product):
    key, body = new_key(), {"lines": [{"sku": product.sku, "quantity": 1}]}
    locked_at = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_LOCK_TIMEOUT + 1)
    IdempotencyKey.objects.create(
        user=user,
        key=key,
        fingerprint=fingerprint(method="POST", path=ORDERS, body=body),
        method="POST",
        path=ORDERS,
        lock_token=uuid.uuid4(),
        locked_at=locked_at,
        created_at=locked_at,
    )

    response = create_order(key=key)

    assert response.status_code == 201
    assert response["Idempotent-Replayed"] == "false"
    assert Order.objects.count() == 1


def test_another_body_goes_on_to_the_view_validation_first_then_422(create_order, counted):
    key = new_key()
    create_order(key=key, quantity=1)

    invalid, _, _ = counted(lambda: create_order(key=key, body={"lines": []}))
    mismatch, statements, _ = counted(lambda: create_order(key=key, quantity=2))

    assert (invalid.status_code, invalid.json()["code"]) == (400, "validation-error")
    assert (mismatch.status_code, mismatch.json()["code"]) == (422, "idempotency-key-mismatch")
    # The core answered (only it says 422), from the record read with the token
    assert statements == 1
    assert Order.objects.count() == 1


def test_the_same_key_from_another_user_is_their_own_new_request(create_order, other_user):
    key = new_key()
    mine = create_order(key=key)

    theirs = create_order(key=key, api=client_for(other_user))

    assert theirs.status_code == 201
    assert theirs["Idempotent-Replayed"] == "false"
    assert theirs.json()["number"] != mine.json()["number"]
    assert Order.objects.count() == 2


def test_a_replay_without_credentials_is_401(create_order):
    key = new_key()
    create_order(key=key)

    anonymous = create_order(key=key, api=client_for(None))
    wrong = client_for(None)
    wrong.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    unknown = create_order(key=key, api=wrong)

    assert (anonymous.status_code, unknown.status_code) == (401, 401)
    assert b"number" not in anonymous.content + unknown.content


def test_an_inactive_users_token_is_refused_even_for_a_replay(create_order, user):
    key = new_key()
    create_order(key=key)
    type(user).objects.filter(pk=user.pk).update(is_active=False)

    response = create_order(key=key)

    assert response.status_code == 401
    assert b"number" not in response.content


def test_a_throttled_replay_is_429_and_not_answered(create_order, user, monkeypatch, counted):
    key = new_key()
    create_order(key=key)
    monkeypatch.setattr(UserRateThrottle, "rate", "1/hour", raising=False)
    redis.Redis.from_url(settings.REDIS_URL).delete(
        f"throttle:user:{user.pk}:{int(time.time() // 3600)}"
    )
    create_order(key=key)  # the window's one request

    throttled, statements, trips = counted(lambda: create_order(key=key))

    assert throttled.status_code == 429
    assert throttled.json()["code"] == "throttled"
    assert (statements, trips) == (1, 1)


@pytest.fixture
def session_client(user: Any) -> Client:
    client = Client(enforce_csrf_checks=True)
    assert client.login(username=user.username, password=DEFAULT_PASSWORD)
    return client


def test_a_session_replay_is_the_same_bytes_and_keeps_the_csrf_check(session_client, product):
    key, body = new_key(), {"lines": [{"sku": product.sku, "quantity": 1}]}
    csrf = get_random_string(CSRF_SECRET_LENGTH)  # the cookie a page would have set
    session_client.cookies[settings.CSRF_COOKIE_NAME] = csrf

    def post(token: str) -> Any:
        return session_client.post(
            ORDERS,
            body,
            content_type="application/json",
            headers={"Idempotency-Key": key, "X-CSRFToken": token},
        )

    first = post(csrf)
    replay = post(csrf)
    forged = post("")

    assert (first.status_code, replay.status_code) == (201, 201), first.content
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.content == first.content
    assert forged.status_code == 403  # a replay is no way around the CSRF check


def test_the_joined_lookup_finds_what_the_two_lookups_find(create_order, user, other_user):
    key = new_key()
    create_order(key=key)
    token = user.auth_token

    for token_key, record_key in [
        (token.key, key),
        (token.key, "absent"),
        (other_user.auth_token.key, key),
        ("0" * 40, key),
    ]:
        found = token_and_record_find(token_key=token_key, key=record_key)
        reference = type(token).objects.select_related("user").filter(key=token_key).first()
        assert (found is None) == (reference is None)
        if found is None or reference is None:
            continue
        joined_token, record = found
        assert (joined_token.key, joined_token.user_id, joined_token.created) == (
            reference.key,
            reference.user_id,
            reference.created,
        )
        assert joined_token.user.__dict__.keys() >= {"password", "is_active", "username"}
        assert (joined_token.user.pk, joined_token.user.is_active) == (
            reference.user.pk,
            reference.user.is_active,
        )
        alone = records.find(user_id=reference.user_id, key=record_key)
        assert (record is None) == (alone is None)
        if record is not None and alone is not None:
            assert record.pk == alone.pk
            assert record.response_body == alone.response_body
            assert record.response_headers == alone.response_headers
