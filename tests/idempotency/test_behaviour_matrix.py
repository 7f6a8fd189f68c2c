"""One test per row of the behaviour matrix (docs/design.md), on order creation.

The rows for an unknown provider outcome live with the payment tests.
"""

import json
import time
import uuid
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.test import Client
from django.utils import timezone

from edge.throttling import UserRateThrottle
from idempotency.core import fingerprint
from idempotency.models import IdempotencyKey, RecoveryPoint
from orders import services as order_services
from orders.models import InventoryMovement, Order
from tests.conftest import client_for, new_key
from tests.factories import DEFAULT_PASSWORD

pytestmark = pytest.mark.django_db

ORDERS = "/api/v1/orders/"


def assert_nothing_written() -> None:
    assert IdempotencyKey.objects.count() == 0
    assert Order.objects.count() == 0
    assert InventoryMovement.objects.filter(kind="RESERVE").count() == 0


def test_header_missing_is_400_and_not_stored(create_order):
    response = create_order(key=None)

    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "idempotency-key-missing"
    assert_nothing_written()


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "has space",
        "x" * 256,
        "ключ-платежа",
        "semi;colon",
        '"unterminated',
        '"inner"quote"',
        "slash/inside",
    ],
)
def test_header_malformed_is_400_and_not_stored(create_order, raw):
    response = create_order(key=raw)

    assert response.status_code == 400
    assert response.json()["code"] == "idempotency-key-invalid"
    assert_nothing_written()


def test_not_authenticated_is_401_and_not_stored(create_order):
    response = create_order(key=new_key(), api=client_for(None))

    assert response.status_code == 401
    assert response.json()["code"] == "not-authenticated"
    assert_nothing_written()


def test_forbidden_is_403_and_not_stored(user, product):
    # A session-authenticated POST without the CSRF token is refused before any work.
    browser = Client(enforce_csrf_checks=True)
    assert browser.login(username=user.username, password=DEFAULT_PASSWORD)

    response = browser.post(
        ORDERS,
        {"lines": [{"sku": product.sku, "quantity": 1}]},
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=new_key(),
    )

    assert response.status_code == 403
    assert response.json()["code"] == "permission-denied"
    assert_nothing_written()


def test_throttled_is_429_and_not_stored(create_order, user, monkeypatch):
    monkeypatch.setattr(UserRateThrottle, "rate", "1/hour", raising=False)
    # A fresh window for this user (ids repeat across test runs; Redis outlives them).
    redis.Redis.from_url(settings.REDIS_URL).delete(
        f"throttle:user:{user.pk}:{int(time.time() // 3600)}"
    )
    first = create_order(key=new_key())

    second = create_order(key=(throttled_key := new_key()))

    assert first.status_code == 201
    assert second.status_code == 429
    assert second.json()["code"] == "throttled"
    assert int(second["Retry-After"]) > 0
    assert not IdempotencyKey.objects.filter(key=throttled_key).exists()
    assert Order.objects.count() == 1


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"lines": []},
        {"lines": [{"sku": "X", "quantity": "two"}]},
        {"lines": "not-a-list"},
        [1, 2, 3],
    ],
)
def test_body_failing_validation_is_400_and_not_stored(create_order, body):
    response = create_order(key=new_key(), body=body)

    assert response.status_code == 400
    assert response.json()["code"] == "validation-error"
    assert_nothing_written()


def test_new_key_runs_the_action_and_stores_the_response(create_order, user):
    key = new_key()

    response = create_order(key=key)

    assert response.status_code == 201
    assert response["Idempotent-Replayed"] == "false"
    record = IdempotencyKey.objects.get(user=user, key=key)
    assert record.recovery_point == RecoveryPoint.FINISHED
    assert record.response_status == 201
    assert json.loads(record.response_body) == response.json()
    assert record.response_headers == {"Location": response["Location"]}
    assert record.lock_token is None
    assert record.resource_type == "order"
    assert record.resource_id == Order.objects.get().pk


def test_same_key_same_body_after_finish_replays_status_body_and_location(create_order):
    key = new_key()
    first = create_order(key=key)

    replay = create_order(key=key)

    assert replay.status_code == 201
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.content == first.content  # the same bytes, key order included
    assert replay["Location"] == first["Location"]
    assert Order.objects.count() == 1


def plant_locked_record(user, product, *, locked_at) -> str:
    """A committed, unfinished order-creation record whose lock was taken at ``locked_at``."""
    key = new_key()
    body = {"lines": [{"sku": product.sku, "quantity": 1}]}
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
    return key


@pytest.mark.parametrize(
    ("lock_age_s", "retry_after"),
    [
        # A live holder is done within one provider call (PROVIDER_TIMEOUT_S = 5 s).
        (0, 5),
        (3, 2),
        # Past that it is likely dead: until its lock may be taken over (60 s).
        (10, 50),
        (45, 15),
        (59, 1),  # under a second left: still 1, never 0
    ],
)
def test_same_key_while_in_flight_is_409_with_retry_after(
    create_order, user, product, settings, lock_age_s, retry_after
):
    settings.PROVIDER_TIMEOUT_S, settings.IDEMPOTENCY_LOCK_TIMEOUT = 5.0, 60
    # Given a request holding the key's lock, taken lock_age_s ago (committed, not finished)
    locked_at = timezone.now() - timedelta(seconds=lock_age_s)
    key = plant_locked_record(user, product, locked_at=locked_at)

    # When the same request arrives again
    response = create_order(key=key)

    # Then it is told to come back once the lock can be taken over, and nothing ran
    assert response.status_code == 409
    assert response.json()["code"] == "idempotency-key-in-use"
    assert response["Retry-After"] == str(retry_after)
    assert Order.objects.count() == 0
    assert IdempotencyKey.objects.get(key=key).recovery_point == RecoveryPoint.STARTED


def test_same_key_different_body_is_422_and_not_stored(create_order):
    key = new_key()
    create_order(key=key, quantity=1)
    stored = IdempotencyKey.objects.get(key=key)

    response = create_order(key=key, quantity=2)

    assert response.status_code == 422
    assert response.json()["code"] == "idempotency-key-mismatch"
    assert IdempotencyKey.objects.get(key=key).response_body == stored.response_body
    assert Order.objects.count() == 1


def test_business_error_after_start_is_stored_and_replayed(create_order, product):
    key = new_key()
    first = create_order(key=key, quantity=product.stock + 1)
    # Even once stock would allow it, the key's answer stays what it was.
    order_services.product_create(sku="OTHER", name="x", price=1, currency="CNY", stock=1)

    replay = create_order(key=key, quantity=product.stock + 1)

    assert first.status_code == 409
    assert first.json()["code"] == "out-of-stock"
    assert first["Idempotent-Replayed"] == "false"
    assert replay.status_code == 409
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json() == first.json()
    assert IdempotencyKey.objects.get(key=key).response_status == 409
    assert Order.objects.count() == 0


def test_unexpected_exception_is_500_rolled_back_and_same_key_then_succeeds(
    create_order, monkeypatch
):
    key = new_key()

    def explode(*args, **kwargs):
        raise RuntimeError("injected")

    with monkeypatch.context() as patch:
        patch.setattr(order_services, "_reserve", explode)
        crashed = create_order(key=key)

    assert crashed.status_code == 500
    assert crashed.json()["code"] == "internal-error"
    assert_nothing_written()
    retried = create_order(key=key)
    assert retried.status_code == 201
    assert retried["Idempotent-Replayed"] == "false"


def test_every_fresh_answer_says_not_replayed(create_order):
    assert create_order(key=None)["Idempotent-Replayed"] == "false"
    assert create_order(key=new_key())["Idempotent-Replayed"] == "false"


def test_keys_are_scoped_per_user(create_order, other_user):
    key = new_key()
    mine = create_order(key=key)

    theirs = create_order(key=key, api=client_for(other_user))

    assert mine.status_code == theirs.status_code == 201
    assert theirs["Idempotent-Replayed"] == "false"
    assert mine.json()["number"] != theirs.json()["number"]
    assert Order.objects.count() == 2


def test_sf_string_and_bare_token_are_the_same_key(create_order):
    first = create_order(key="order-2026-11-29:abc~1")

    replay = create_order(key='"order-2026-11-29:abc~1"')

    assert first.status_code == 201
    assert replay["Idempotent-Replayed"] == "true"
    assert IdempotencyKey.objects.get().key == "order-2026-11-29:abc~1"


def test_abandoned_lock_is_taken_over_by_a_retry(create_order, user, product, settings):
    # Given a request that took the key and died without finishing
    abandoned_at = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_LOCK_TIMEOUT + 1)
    key = plant_locked_record(user, product, locked_at=abandoned_at)

    # When the client retries after the lock timeout
    response = create_order(key=key)

    # Then the retry takes over and finishes the request once
    assert response.status_code == 201
    assert response["Idempotent-Replayed"] == "false"
    record = IdempotencyKey.objects.get(key=key)
    assert record.recovery_point == RecoveryPoint.FINISHED
    assert Order.objects.count() == 1
