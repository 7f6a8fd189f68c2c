"""Order creation under real concurrency: threads, own connections, real PostgreSQL."""

from collections import Counter

import pytest

from idempotency.models import IdempotencyKey
from orders.models import InventoryMovement, Order, Product
from tests.concurrency.helpers import run_at_once
from tests.conftest import client_for, new_key
from tests.factories import ProductFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_100_identical_requests_make_one_order_and_one_stock_movement(user):
    product = ProductFactory.create(stock=500)
    key = new_key()
    body = {"lines": [{"sku": product.sku, "quantity": 2}]}

    def send(_index: int) -> tuple[int, str]:
        response = client_for(user).post(
            "/api/v1/orders/", body, format="json", headers={"Idempotency-Key": key}
        )
        return response.status_code, response["Idempotent-Replayed"]

    answers = run_at_once(100, send)

    assert all(status < 500 for status, _ in answers), Counter(answers)
    assert set(answers) <= {(201, "false"), (201, "true"), (409, "false")}
    assert answers.count((201, "false")) == 1  # exactly one request ran the action
    assert Order.objects.count() == 1
    assert InventoryMovement.objects.filter(kind="RESERVE").count() == 1
    assert Product.objects.get(pk=product.pk).stock == 498
    assert IdempotencyKey.objects.count() == 1


def test_50_requests_with_different_keys_race_for_10_items(user):
    product = ProductFactory.create(stock=10)
    body = {"lines": [{"sku": product.sku, "quantity": 1}]}

    def send(_index: int) -> int:
        response = client_for(user).post(
            "/api/v1/orders/", body, format="json", headers={"Idempotency-Key": new_key()}
        )
        return response.status_code

    statuses = Counter(run_at_once(50, send))

    assert statuses == {201: 10, 409: 40}
    assert Order.objects.count() == 10
    assert Product.objects.get(pk=product.pk).stock == 0
    # Every failed request stored its out-of-stock answer; nothing else was reserved.
    assert InventoryMovement.objects.filter(kind="RESERVE").count() == 10
    assert IdempotencyKey.objects.filter(response_status=409).count() == 40
