"""Per-user growth is bounded: unpaid orders held at once (409 `too-many-open-orders`)
and idempotency records created per hour (429 `idempotency-key-quota`). Nothing is
written past either cap, and replays never count."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.conf import settings as django_settings

from idempotency.models import IdempotencyKey
from orders.models import InventoryMovement, Order, Product
from tests.concurrency.helpers import run_at_once
from tests.conftest import client_for, new_key
from tests.factories import ProductFactory, UserFactory

CAP = 3


def order_body(product: Product) -> dict[str, Any]:
    return {"lines": [{"sku": product.sku, "quantity": 1}]}


def post_order(api: Any, product: Product, key: str) -> Any:
    return api.post(
        "/api/v1/orders/", order_body(product), format="json", headers={"Idempotency-Key": key}
    )


# --- Open orders ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_past_the_open_order_cap_nothing_is_written(settings, user, client, product):
    settings.MAX_OPEN_ORDERS_PER_USER = CAP
    for _ in range(CAP):
        assert post_order(client, product, new_key()).status_code == 201
    stock = Product.objects.get(pk=product.pk).stock

    refused = post_order(client, product, key := new_key())

    assert refused.status_code == 409
    assert refused.json()["code"] == "too-many-open-orders"
    assert Order.objects.filter(user=user).count() == CAP
    assert not IdempotencyKey.objects.filter(key=key).exists()
    assert Product.objects.get(pk=product.pk).stock == stock
    assert InventoryMovement.objects.filter(kind="RESERVE").count() == CAP


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_order_frees_its_place_and_the_same_key_then_works(
    settings, user, client, product
):
    settings.MAX_OPEN_ORDERS_PER_USER = 1
    first = post_order(client, product, new_key()).json()["number"]
    key = new_key()
    assert post_order(client, product, key).status_code == 409

    client.post(f"/api/v1/orders/{first}/cancel/", headers={"Idempotency-Key": new_key()})
    again = post_order(client, product, key)

    assert again.status_code == 201  # the refusal was not stored under the key


@pytest.mark.django_db(transaction=True)
def test_other_users_and_a_zero_cap_are_not_limited(settings, user, client, product):
    settings.MAX_OPEN_ORDERS_PER_USER = 1
    assert post_order(client, product, new_key()).status_code == 201
    assert post_order(client_for(UserFactory.create()), product, new_key()).status_code == 201

    settings.MAX_OPEN_ORDERS_PER_USER = 0
    assert post_order(client, product, new_key()).status_code == 201


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_concurrent_creations_never_exceed_the_open_order_cap(settings):
    settings.MAX_OPEN_ORDERS_PER_USER = CAP
    user = UserFactory.create()
    product = ProductFactory.create(stock=100)
    token = user.auth_token.key
    threads = 12

    def create(_: int) -> int:
        api = client_for(None)
        api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        return int(post_order(api, product, new_key()).status_code)

    statuses = run_at_once(threads, create)

    assert sorted(statuses) == [201] * CAP + [409] * (threads - CAP)
    assert Order.objects.filter(user=user).count() == CAP
    assert IdempotencyKey.objects.filter(user=user).count() == CAP
    assert Product.objects.get(pk=product.pk).stock == 100 - CAP


# --- Idempotency records per hour ----------------------------------------------------


def clear_quota(user_id: int) -> None:
    # User ids repeat across runs; the quota's counter lives in Redis and outlives them.
    broker = redis.Redis.from_url(django_settings.REDIS_URL)
    for key in broker.scan_iter(f"idempotency-quota:{user_id}:*"):
        broker.delete(key)


@pytest.fixture
def fresh_quota(user: Any, still_clock: float) -> None:
    clear_quota(user.pk)


@pytest.mark.django_db
def test_past_the_key_quota_a_new_key_is_429_and_nothing_is_written(
    settings, user, client, product, fresh_quota
):
    settings.MAX_KEYS_PER_USER_PER_HOUR = CAP
    keys = [new_key() for _ in range(CAP)]
    for key in keys:
        assert post_order(client, product, key).status_code == 201

    refused = post_order(client, product, late := new_key())

    assert refused.status_code == 429
    assert refused.json()["code"] == "idempotency-key-quota"
    assert 0 < int(refused["Retry-After"]) <= 3601
    assert not IdempotencyKey.objects.filter(key=late).exists()
    assert Order.objects.filter(user=user).count() == CAP
    # Replays are answered, as often as asked, and never count against the quota
    for key in keys * 2:
        replay = post_order(client, product, key)
        assert replay.status_code == 201
        assert replay["Idempotent-Replayed"] == "true"
    assert IdempotencyKey.objects.filter(user=user).count() == CAP


@pytest.mark.django_db
def test_the_key_quota_is_per_user_and_zero_means_no_quota(
    settings, user, client, product, fresh_quota
):
    settings.MAX_KEYS_PER_USER_PER_HOUR = 1
    other = UserFactory.create()
    clear_quota(other.pk)
    assert post_order(client, product, new_key()).status_code == 201
    assert post_order(client_for(other), product, new_key()).status_code == 201

    settings.MAX_KEYS_PER_USER_PER_HOUR = 0
    assert post_order(client, product, new_key()).status_code == 201
