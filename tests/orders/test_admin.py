"""The order admin's "Allowed transitions", read from the state machine."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.utils import timezone

from orders.admin import OrderAdmin
from orders.models import Order
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _order(*, amount: int = 1999) -> Order:
    return Order.objects.create(
        number=f"T-{amount}", user=UserFactory.create(), amount=amount, currency="CNY"
    )


def _allowed(order: Order) -> str:
    return OrderAdmin(Order, admin.site).allowed_transitions(order)


def test_an_unpaid_order_may_be_paid_or_cancelled():
    assert _allowed(_order()) == "cancel → CANCELLED, mark_paid → PAID"


def test_a_paid_order_shows_the_refund_it_may_still_take():
    # Given a PAID order with nothing refunded yet
    order = _order()
    order.mark_paid(paid_at=timezone.now())
    order.save()

    # Then REFUNDED is offered, with the condition that is not met yet (not "final")
    assert _allowed(order) == "mark_refunded → REFUNDED (when fully refunded)"


def test_a_fully_refunded_order_shows_its_transition_as_ready_and_then_its_reversal():
    order = _order()
    order.mark_paid(paid_at=timezone.now())
    order.save()
    Order.objects.filter(pk=order.pk).update(refunded_amount=order.amount)
    order.refresh_from_db()
    assert _allowed(order) == "mark_refunded → REFUNDED"

    order.mark_refunded()
    order.save()
    # Not final: a refund that fails at the provider after it succeeded takes it back
    # to PAID (payments/reversals.py), once its amount is out of refunded_amount.
    assert _allowed(order) == "mark_unrefunded → PAID (when not fully refunded)"


def test_a_cancelled_order_is_final():
    order = _order()
    order.cancel()
    order.save()

    assert _allowed(order) == "none (final state)"
