"""Order creation and cancellation as idempotent flows: one atomic phase each.

The record and the business rows (order, lines, stock reservation; or the
cancellation and its stock release) commit in one transaction (see
``idempotency.core.atomic_phase``). Out of stock and not cancellable are final
answers: stored and replayed. An unknown SKU is bad input: nothing is stored.
"""

from collections.abc import Sequence

from django.urls import reverse

from idempotency.core import Respond, single_phase
from idempotency.models import IdempotencyKey
from orders.selectors import order_get
from orders.serializers import OrderOutputSerializer, order_representation
from orders.services import LineRequest, order_cancel, order_create


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


def order_cancel_flow(record: IdempotencyKey, *, user_id: int, order_number: str) -> None:
    def cancel() -> Respond:
        # Someone else's order is a 404, raised before anything is stored.
        order = order_cancel(order=order_get(user_id=user_id, number=order_number))
        return Respond(
            status=200,
            body=order_representation(order_id=order.pk),
            resource_type="order",
            resource_id=order.pk,
        )

    single_phase(record, cancel)
