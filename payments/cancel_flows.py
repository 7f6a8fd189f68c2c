"""Cancelling an order as an idempotent flow: one atomic phase.

Here, not in orders/: the rule "not while a payment attempt is live" spans orders
and payments, and orders may not import payments (docs/architecture.md).
"""

from __future__ import annotations

from idempotency.models import IdempotencyKey
from idempotency.phases import Respond, single_phase
from orders.selectors import order_get
from orders.serializers import order_representation
from orders.services import order_cancel
from payments.services import order_cancel_blocker


def order_cancel_flow(record: IdempotencyKey, *, user_id: int, order_number: str) -> None:
    """UNPAID -> CANCELLED in one atomic phase; not cancellable is final (stored)."""

    def cancel() -> Respond:
        # Someone else's order is a 404, raised before anything is stored.
        order = order_cancel(
            order=order_get(user_id=user_id, number=order_number), blocker=order_cancel_blocker
        )
        return Respond(
            status=200,
            body=order_representation(order_id=order.pk),
            resource_type="order",
            resource_id=order.pk,
        )

    single_phase(record, cancel)
