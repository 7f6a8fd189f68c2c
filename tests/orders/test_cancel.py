"""POST /api/v1/orders/{number}/cancel/: UNPAID -> CANCELLED, stock released once."""

from collections import Counter

import pytest

from idempotency.models import IdempotencyKey
from orders.models import InventoryMovement, Order, Product
from payments.services import payment_create
from tests.concurrency.helpers import run_at_once
from tests.conftest import client_for, new_key


@pytest.fixture
def unpaid(create_order) -> Order:
    return Order.objects.get(number=create_order(key=new_key(), quantity=3).json()["number"])


def cancel(client, order, key=None):
    return client.post(
        f"/api/v1/orders/{order.number}/cancel/",
        format="json",
        headers={"Idempotency-Key": key or new_key()},
    )


def assert_released_once(order: Order, product: Product) -> None:
    assert Order.objects.get(pk=order.pk).status == "CANCELLED"
    assert InventoryMovement.objects.filter(order=order, kind="RELEASE").count() == 1
    assert Product.objects.get(pk=product.pk).stock == product.stock


@pytest.mark.django_db
def test_cancel_releases_stock_and_replays(client, unpaid, product):
    key = new_key()

    first = cancel(client, unpaid, key)
    replay = cancel(client, unpaid, key)

    assert first.status_code == 200
    assert first.json()["status"] == "CANCELLED"
    assert replay.json() == first.json()
    assert replay["Idempotent-Replayed"] == "true"
    assert_released_once(unpaid, product)


@pytest.mark.django_db
def test_cancelling_twice_with_new_keys_releases_once(client, unpaid, product):
    cancel(client, unpaid)

    second = cancel(client, unpaid)

    assert second.status_code == 409
    assert second.json()["code"] == "order-not-cancellable"
    assert_released_once(unpaid, product)


@pytest.mark.django_db
def test_cancel_is_refused_while_a_payment_attempt_is_live(client, unpaid, user, product):
    payment_create(user_id=user.pk, order_number=unpaid.number)

    response = cancel(client, unpaid)

    assert response.status_code == 409
    assert response.json()["code"] == "order-not-cancellable"
    assert Order.objects.get(pk=unpaid.pk).status == "UNPAID"
    assert Product.objects.get(pk=product.pk).stock == product.stock - 3


@pytest.mark.django_db
def test_someone_elses_order_is_404_and_not_stored(unpaid, other_user):
    key = new_key()

    response = cancel(client_for(other_user), unpaid, key)

    assert response.status_code == 404
    assert not IdempotencyKey.objects.filter(key=key).exists()
    assert Order.objects.get(pk=unpaid.pk).status == "UNPAID"


@pytest.mark.django_db(transaction=True)
def test_concurrent_cancels_release_once(unpaid, user, product):
    statuses = Counter(run_at_once(10, lambda _i: cancel(client_for(user), unpaid).status_code))

    assert statuses == {200: 1, 409: 9}, statuses
    assert_released_once(unpaid, product)


@pytest.mark.django_db
def test_the_release_index_refuses_a_second_release(unpaid):
    from django.db import IntegrityError, transaction

    line = unpaid.lines.get()
    InventoryMovement.objects.create(
        product_id=line.product_id, order=unpaid, kind="RELEASE", quantity=line.quantity
    )

    with pytest.raises(IntegrityError), transaction.atomic():
        InventoryMovement.objects.create(
            product_id=line.product_id, order=unpaid, kind="RELEASE", quantity=line.quantity
        )
