"""Product rows are locked in one global order (by id) by every writer.

Order creation reserves its products in id order. The expiry batch used to
release them order after order, so two old orders holding two products in the
opposite order made it lock the higher id first: against a creation of both
products, a textbook deadlock (PostgreSQL aborts one side, 409
``concurrent-update``). The race is set up exactly: the batch pauses after its
first cancel, the creation is started and seen waiting on a lock, then the
batch goes on.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, connections
from django.db.models import F

from orders.models import Order, Product
from orders.services import LineRequest, order_create
from reconcile.recovery import expiry
from tests.concurrency.helpers import backend_pid, wait_until_waiting_on_a_lock
from tests.conftest import new_key
from tests.factories import ProductFactory

pytestmark = pytest.mark.django_db(transaction=True)


def old_order(user: Any, product: Product, *, age_s: float) -> Order:
    order = order_create(
        user_id=user.pk, lines=[LineRequest(sku=product.sku, quantity=1)], idempotency_key=new_key()
    )
    Order.objects.filter(pk=order.pk).update(created_at=F("created_at") - timedelta(seconds=age_s))
    return order


def test_the_expiry_batch_and_an_order_creation_never_deadlock(user, client, settings, monkeypatch):
    # Given two products, and two expired orders that hold them against id order:
    # the batch cancels the first order (the higher product) before the second
    low, high = ProductFactory.create(stock=10), ProductFactory.create(stock=10)
    assert low.pk < high.pk
    holds_high = old_order(user, high, age_s=settings.ORDER_TTL_S + 1)
    holds_low = old_order(user, low, age_s=settings.ORDER_TTL_S + 1)
    assert holds_high.pk < holds_low.pk

    # and an expiry batch that pauses after its first cancel, inside its transaction
    paused, resume = threading.Event(), threading.Event()
    cancel = expiry.order_cancel

    def cancel_then_pause(**kwargs: Any) -> Any:
        cancelled = cancel(**kwargs)
        if not paused.is_set():
            paused.set()
            assert resume.wait(10)
        return cancelled

    monkeypatch.setattr(expiry, "order_cancel", cancel_then_pause)
    outcome: dict[str, Any] = {}
    creation_pid: list[int] = []
    creation_ready = threading.Event()

    def expire() -> None:
        try:
            outcome["expiry"] = expiry.run_once()
        except OperationalError as error:  # a deadlock victim
            outcome["expiry"] = error
        finally:
            connections.close_all()

    def create() -> None:
        try:
            creation_pid.append(backend_pid())
            creation_ready.set()
            outcome["creation"] = client.post(
                "/api/v1/orders/",
                {"lines": [{"sku": low.sku, "quantity": 1}, {"sku": high.sku, "quantity": 1}]},
                format="json",
                headers={"Idempotency-Key": new_key()},
            )
        finally:
            connections.close_all()

    expiring = threading.Thread(target=expire)
    creating = threading.Thread(target=create)
    try:
        # When the batch has cancelled its first order and waits there
        expiring.start()
        assert paused.wait(10)
        # and a creation of both products is waiting on a product lock
        creating.start()
        assert creation_ready.wait(10)
        wait_until_waiting_on_a_lock(creation_pid[0])
    finally:
        # then the batch goes on
        resume.set()
        expiring.join(30)
        creating.join(30)

    # Then neither was aborted: the batch expired both, the creation succeeded
    created = outcome["creation"]
    assert created.status_code == 201, created.content
    assert outcome["expiry"] == expiry.ExpireCounts(expired=2, skipped_live_attempt=0)
    assert set(
        Order.objects.filter(pk__in=[holds_high.pk, holds_low.pk]).values_list("status")
    ) == {(Order.Status.CANCELLED,)}
    # and stock is exact: both released once, one unit each to the new order
    assert set(Product.objects.filter(pk__in=[low.pk, high.pk]).values_list("stock")) == {(9,)}
