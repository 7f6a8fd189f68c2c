"""Expiry: an unpaid order past ORDER_TTL_S is cancelled, its stock back once; never while
a payment attempt is live; and an expiry racing a customer's cancel releases once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F

from orders.errors import OrderNotCancellable
from orders.models import InventoryMovement, Order, Product
from orders.services import LineRequest, order_cancel, order_create
from payments.services import order_cancel_blocker, payment_create
from reconcile.recovery import expiry
from tests.concurrency.helpers import run_at_once
from tests.conftest import new_key


def make_order(user, product, *, quantity: int = 2, age_s: float = 0) -> Order:
    order = order_create(
        user_id=user.pk,
        lines=[LineRequest(sku=product.sku, quantity=quantity)],
        idempotency_key=new_key(),
    )
    if age_s:
        # auto_now_add: back-date with an UPDATE, as time passing would.
        Order.objects.filter(pk=order.pk).update(
            created_at=F("created_at") - timedelta(seconds=age_s)
        )
    return order


def releases(order: Order) -> int:
    return InventoryMovement.objects.filter(order=order, kind="RELEASE").count()


@pytest.mark.django_db
def test_an_old_unpaid_order_is_cancelled_and_its_stock_released_once(user, product, settings):
    old = make_order(user, product, age_s=settings.ORDER_TTL_S + 1)
    young = make_order(user, product)
    assert Product.objects.get(pk=product.pk).stock == product.stock - 4

    first = expiry.run_once()
    second = expiry.run_once()

    assert (first.expired, second.expired) == (1, 0)
    assert Order.objects.get(pk=old.pk).status == "CANCELLED"
    assert Order.objects.get(pk=young.pk).status == "UNPAID"
    assert releases(old) == 1
    assert Product.objects.get(pk=product.pk).stock == product.stock - 2


@pytest.mark.django_db
def test_an_order_with_a_live_attempt_is_skipped_not_expired(user, product, settings):
    order = make_order(user, product, age_s=settings.ORDER_TTL_S + 1)
    payment_create(user_id=user.pk, order_number=order.number)  # PENDING: maybe charging

    counts = expiry.run_once()

    assert (counts.expired, counts.skipped_live_attempt) == (0, 1)
    assert Order.objects.get(pk=order.pk).status == "UNPAID"
    assert releases(order) == 0
    assert Product.objects.get(pk=product.pk).stock == product.stock - 2


@pytest.mark.django_db
def test_expiry_walks_every_batch_past_skipped_orders(user, product, settings):
    age = settings.ORDER_TTL_S + 1
    orders = [make_order(user, product, quantity=1, age_s=age) for _ in range(5)]
    payment_create(user_id=user.pk, order_number=orders[1].number)

    counts = expiry.run_once(batch_size=2)

    assert (counts.expired, counts.skipped_live_attempt) == (4, 1)
    assert Order.objects.filter(status="CANCELLED").count() == 4


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_expiry_racing_a_cancel_releases_the_stock_once(user, product, settings):
    for _ in range(3):
        order = make_order(user, product, age_s=settings.ORDER_TTL_S + 1)
        stock_before = Product.objects.get(pk=product.pk).stock

        def race(index: int, order: Order = order) -> str:
            if index == 0:
                return f"expired={expiry.run_once().expired}"
            try:
                order_cancel(order=order, blocker=order_cancel_blocker)
            except OrderNotCancellable:
                return "cancel refused"
            return "cancelled"

        outcomes = run_at_once(2, race)

        # Exactly one of them cancelled it, and the stock came back once
        assert sorted(outcomes) in (
            ["cancel refused", "expired=1"],
            ["cancelled", "expired=0"],
        )
        assert Order.objects.get(pk=order.pk).status == "CANCELLED"
        assert releases(order) == 1
        assert Product.objects.get(pk=product.pk).stock == stock_before + 2
