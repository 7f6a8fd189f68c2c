"""Background work on orders (thin: each task calls one service)."""

from celery import shared_task

from orders.services import shipment_create


@shared_task
def fulfil_order(order_id: int) -> bool:
    """Create the shipment of a PAID order; enqueued on commit when it becomes PAID."""
    return shipment_create(order_id=order_id) is not None


@shared_task
def fulfil_orders(order_ids: list[int]) -> int:
    """``fulfil_order`` for a batch the reconciler settled together: one message, not one
    per order (each is a broker round trip in the pass's thread). How many it shipped."""
    return sum(shipment_create(order_id=order_id) is not None for order_id in order_ids)
