"""The fulfil sweep: a PAID order without a shipment gets one.

Normally the shipment is made by ``orders.tasks.fulfil_order``, enqueued when
the order becomes PAID (``fulfil_orders`` for a batch the reconciler settled).
A message can still be lost (a broker flushed, a worker killed past its
retries); this sweep is the safety net. It calls the
same ``shipment_create``, whose unique order column makes a race with a late
task (or a second sweep) harmless: one shipment per order, whoever comes first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.utils import timezone

from orders.models import Order
from orders.services import shipment_create
from reconcile.desk.isolation import FULFILMENT, FailureIsolation
from reconcile.selectors import orders_paid_unshipped

# Orders per read; each costs three small statements in shipment_create.
BATCH_SIZE = 100


@dataclass(frozen=True)
class FulfilCounts:
    """What one sweep did: orders it found unshipped, shipments that now exist, and
    orders whose shipment raised (counted and backing off, the others shipped)."""

    examined: int = 0
    shipped: int = 0
    failed: int = 0


def run_once(*, batch_size: int = BATCH_SIZE) -> FulfilCounts:
    """Ship every PAID order left unshipped for FULFIL_SWEEP_AFTER_S."""
    # The grace period leaves the normal path its time: the sweep is not a second,
    # racing fulfilment of every order, only of the ones the task missed.
    paid_before = timezone.now() - timedelta(seconds=settings.FULFIL_SWEEP_AFTER_S)
    isolation = FailureIsolation(job=FULFILMENT, subject_type="order")
    examined = shipped = 0
    after_id = 0
    while batch := orders_paid_unshipped(
        paid_before=paid_before, after_id=after_id, limit=batch_size
    ):
        after_id = batch[-1]
        numbers = dict(Order.objects.filter(pk__in=batch).values_list("pk", "number"))
        for order_id in batch:
            if not isolation.due(order_id):
                continue  # failed lately: backing off
            examined += 1
            # Each shipment is its own transaction (shipment_create's): one that
            # raises is counted and rolled back alone.
            shipment = isolation.run(
                key=order_id,
                reference=numbers.get(order_id, str(order_id)),
                work=partial(shipment_create, order_id=order_id),
                failed=None,
            )
            shipped += shipment is not None
    return FulfilCounts(examined=examined, shipped=shipped, failed=isolation.failed)
