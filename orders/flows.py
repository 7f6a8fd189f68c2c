"""Order creation as an idempotent flow: one atomic phase.

The record and the business rows (order, lines, stock reservation) commit in
one transaction (see ``idempotency.phases.atomic_phase``). Out of stock is a
final answer: stored and replayed. An unknown SKU is bad input: nothing is
stored. Cancelling must respect payment attempts, so its flow lives a layer up,
in ``payments.cancel_flows``.
"""

from collections.abc import Sequence

from django.urls import reverse

from idempotency.models import IdempotencyKey
from idempotency.phases import Respond, single_phase
from orders.serializers import OrderOutputSerializer
from orders.services import LineRequest, order_create


def order_create_flow(
    record: IdempotencyKey, *, user_id: int, lines: Sequence[LineRequest]
) -> None:
    def create() -> Respond:
        order = order_create(user_id=user_id, lines=lines, idempotency_key=record.key)
        return Respond(
            status=201,
            body=OrderOutputSerializer(order).data,
            headers={"Location": reverse("order-detail", kwargs={"number": order.number})},
            resource_type="order",
            resource_id=order.pk,
        )

    single_phase(record, create)
