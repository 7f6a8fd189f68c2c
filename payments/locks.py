"""The one lock order of every writer of an order's money: the order row, then its
payment attempt, then its refund attempt.

Two writers that lock the same rows in different orders can deadlock: a pay, a
cancel, an expiry, a settlement, a refund, an orphaned capture's booking and
the start of its next refund all touch an order and its attempts. So each of
them locks through these helpers, never with its own ``select_for_update``:
the order comes first (``orders.locks``, which a cancel and an expiry use too:
it is the row every one of them shares, and the one whose lock serialises
them), the attempt after it. A reader of any writer sees the order in the
helper's name, not in a comment that could drift.
"""

from __future__ import annotations

from django.db.models import Subquery

from orders.locks import lock_order, orders_to_lock
from orders.models import Order
from payments.models import Payment, Refund

# The first step, re-exported: a writer of payments finds the whole order here.
__all__ = [
    "lock_order",
    "lock_order_and_payment",
    "lock_order_and_refund",
    "orders_to_lock",
]


def lock_order_and_payment(*, payment_id: int) -> tuple[Order, Payment]:
    """The attempt's order, then the attempt (two statements: the order is found
    by a subquery, so nothing is read before the first lock)."""
    of_payment = Payment.objects.filter(pk=payment_id).values("order_id")
    order = orders_to_lock().get(pk=Subquery(of_payment))
    return order, Payment.objects.select_for_update().get(pk=payment_id)


def lock_order_and_refund(*, refund_attempt_id: int) -> tuple[Order, Refund]:
    """The refund's order (the order of the attempt it gives money back from; an
    orphaned capture's refund has no order of its own), then the refund."""
    of_refund = Refund.objects.filter(pk=refund_attempt_id).values("payment__order_id")
    order = orders_to_lock().get(pk=Subquery(of_refund))
    refund = Refund.objects.select_for_update(of=("self",)).select_related("payment")
    return order, refund.get(pk=refund_attempt_id)
