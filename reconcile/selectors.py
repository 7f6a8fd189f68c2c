"""Reads of the background work: what is due, in batches, by primary key.

Every list is ordered by id and continues after ``after_id`` (keyset paging):
a pass walks the whole set once even when it leaves some rows as they are
(an order with a live attempt, a record still awaiting its payment), instead
of meeting the same first batch again and again.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from django.db.models import Q

from idempotency.models import IdempotencyKey, RecoveryPoint
from orders.models import Order

# What a record names when it made (or is making) a payment attempt.
PAYMENT_RESOURCE = "payment"


def records_unfinished_for_payments(*, payment_ids: Collection[int]) -> list[int]:
    """The unfinished records that made these payment attempts: one query per batch.

    There is no index on the resource columns, but the partial index of
    unfinished records (``idempotency_unfinished_idx``) confines the scan to
    requests in flight, a small set; the finished millions are never read.
    """
    if not payment_ids:
        return []
    return list(
        IdempotencyKey.objects.exclude(recovery_point=RecoveryPoint.FINISHED)
        .filter(resource_type=PAYMENT_RESOURCE, resource_id__in=list(payment_ids))
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def records_abandoned(*, stale_before: datetime, after_id: int, limit: int) -> list[int]:
    """Unfinished records whose lock is free or older than the lock timeout."""
    return list(
        IdempotencyKey.objects.exclude(recovery_point=RecoveryPoint.FINISHED)
        .filter(Q(locked_at__isnull=True) | Q(locked_at__lt=stale_before), pk__gt=after_id)
        .order_by("pk")
        .values_list("pk", flat=True)[:limit]
    )


def orders_paid_unshipped(*, paid_before: datetime, after_id: int, limit: int) -> list[int]:
    """PAID orders without a shipment, paid before ``paid_before``."""
    return list(
        Order.objects.filter(
            status=Order.Status.PAID,
            shipment__isnull=True,
            paid_at__lt=paid_before,
            pk__gt=after_id,
        )
        .order_by("pk")
        .values_list("pk", flat=True)[:limit]
    )
