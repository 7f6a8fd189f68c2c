"""The first lock of every writer of an order: the order row.

Every writer of an order or of its money (a cancel, an expiry, a pay, a
settlement, a refund, an orphaned capture's booking) locks the order row
first, through these helpers and never with a ``select_for_update`` of its
own: it is the row they all share, so its lock serialises them, and two
writers that take their locks in one order cannot deadlock. What comes after
it is the layer above's to say (``payments.locks``: the order, then its payment
attempt, then its refund attempt); orders know nothing of payments
(docs/architecture.md), so this module holds only the first step.

The product rows an order gives stock back to come after the order, by id
(``orders.services.order_products_lock``).
"""

from __future__ import annotations

from django.db.models import QuerySet

from orders.models import Order


def orders_to_lock() -> QuerySet[Order]:
    """Orders to look up and lock first (by number and owner, say): nothing else held."""
    return Order.objects.select_for_update()


def lock_order(*, order_id: int) -> Order:
    """The order row, locked: the first lock of its writer's transaction."""
    return orders_to_lock().get(pk=order_id)


def lock_order_unless_busy(*, order_id: int) -> Order | None:
    """The order row locked, or None at once if another writer holds it (SKIP LOCKED).

    For a batch job that must not queue behind a customer: an order being paid or
    cancelled right now is theirs, and the next pass looks again.
    """
    return Order.objects.select_for_update(skip_locked=True).filter(pk=order_id).first()
