"""The one lock order of every writer of an order's money: the order row, then its
payment attempt, then its refund attempt.

Two writers that lock the same rows in different orders can deadlock: a pay, a
cancel, a settlement, a refund, an orphaned capture's booking and the start of
its next refund all touch an order and its attempts. So each of them locks
through these helpers, never with its own ``select_for_update``: the order
comes first (it is the row every one of them shares, and the one whose lock
serialises them), the attempt after it. A reader of any writer sees the order
in the helper's name, not in a comment that could drift.

The batch settlement (``payments.batches``) is the one fast path that spells the
same order in SQL (its orders ``ORDER BY id FOR UPDATE``, then the attempts).
"""

from __future__ import annotations

from django.db.models import QuerySet, Subquery

from orders.models import Order
from payments.models import Payment, Refund


def orders_to_lock() -> QuerySet[Order]:
    """Orders to look up and lock first (by number and owner, say): nothing else held."""
    return Order.objects.select_for_update()


def lock_order(*, order_id: int) -> Order:
    """The order row alone (the writer then touches its attempts by conditional UPDATEs)."""
    return orders_to_lock().get(pk=order_id)


def lock_order_and_payment(*, payment_id: int) -> tuple[Order, Payment]:
    """The attempt's order, then the attempt (two statements: the order is found
    by a subquery, so nothing is read before the first lock)."""
    of_payment = Payment.objects.filter(pk=payment_id).values("order_id")
    order = orders_to_lock().get(pk=Subquery(of_payment))
    return order, Payment.objects.select_for_update().get(pk=payment_id)


def lock_order_and_refund(*, refund_id: int) -> tuple[Order, Refund]:
    """The refund's order (the order of the attempt it gives money back from; an
    orphaned capture's refund has no order of its own), then the refund."""
    of_refund = Refund.objects.filter(pk=refund_id).values("payment__order_id")
    order = orders_to_lock().get(pk=Subquery(of_refund))
    refund = Refund.objects.select_for_update(of=("self",)).select_related("payment")
    return order, refund.get(pk=refund_id)
