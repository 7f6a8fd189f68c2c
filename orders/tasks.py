"""Background work on orders (thin: each task calls one service)."""

from celery import shared_task

from orders.services import shipment_create


@shared_task
def fulfil_order(order_id: int) -> bool:
    """Create the shipment of a PAID order; enqueued on commit when it becomes PAID."""
    return shipment_create(order_id=order_id) is not None
