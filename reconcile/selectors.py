"""Reads of the background work: what is due, in batches, by primary key.

Every list is ordered by id and continues after ``after_id`` (keyset paging):
a pass walks the whole set once even when it leaves some rows as they are
(an order with a live attempt, a record still awaiting its payment), instead
of meeting the same first batch again and again.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from django.db.models import Exists, OuterRef, Q

from callbacks.models import ProviderNotification
from idempotency.models import IdempotencyKey, RecoveryPoint
from observability.selectors import count_and_age
from orders.models import Order
from payments.disputes import HOLDING_STATUSES
from payments.models import Dispute, Payment, PaymentStatus, Refund, RefundAttemptStatus
from reconcile.models import StrayCapture

# What a record names when it made (or is making) a payment or a refund attempt.
PAYMENT_RESOURCE = "payment"
REFUND_RESOURCE = "refund"


def records_unfinished_for(*, resource_type: str, ids: Collection[int]) -> list[int]:
    """The unfinished records that made these attempts: one query per batch.

    There is no index on the resource columns, but the partial index of
    unfinished records (``idempotency_unfinished_idx``) confines the scan to
    requests in flight, a small set; the finished millions are never read.
    """
    if not ids:
        return []
    return list(
        IdempotencyKey.objects.exclude(recovery_point=RecoveryPoint.FINISHED)
        .filter(resource_type=resource_type, resource_id__in=list(ids))
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def records_unfinished_of(*, resource_type: str, ids: Collection[int]) -> list[IdempotencyKey]:
    """``records_unfinished_for``, the records themselves: what the completer needs of
    them to finish a batch at once (where each stands, what it names, its route)."""
    if not ids:
        return []
    return list(
        IdempotencyKey.objects.exclude(recovery_point=RecoveryPoint.FINISHED)
        .filter(resource_type=resource_type, resource_id__in=list(ids))
        .only("recovery_point", "resource_type", "resource_id", "method", "path")
        .order_by("pk")
    )


def records_abandoned(
    *, stale_before: datetime, after_id: int, limit: int
) -> list[tuple[int, str]]:
    """(id, key) of unfinished records whose lock is free or older than the lock timeout."""
    return list(
        IdempotencyKey.objects.exclude(recovery_point=RecoveryPoint.FINISHED)
        .filter(Q(locked_at__isnull=True) | Q(locked_at__lt=stale_before), pk__gt=after_id)
        .order_by("pk")
        .values_list("pk", "key")[:limit]
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


def payments_orphaned_without_refund() -> list[int]:
    """Orphaned captures with no refund attempt in flight or done (the last one declined,
    or reversed after it succeeded), and no dispute holding their money.

    Few by nature (a provider settling late and contrary), read off the status.
    """
    return list(
        Payment.objects.filter(status=PaymentStatus.ORPHANED)
        .exclude(
            Exists(
                Refund.objects.filter(payment=OuterRef("pk"), order__isnull=True).exclude(
                    status__in=[RefundAttemptStatus.FAILED, RefundAttemptStatus.REVERSED]
                )
            )
        )
        .exclude(
            # A dispute open or lost decides where the money goes (payments/disputes.py).
            Exists(Dispute.objects.filter(payment=OuterRef("pk"), status__in=HOLDING_STATUSES))
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def notifications_unresolved(
    *, received_before: datetime, after_id: int, limit: int
) -> list[ProviderNotification]:
    """Deferred and rejected notifications nobody resolved yet, with what they name.

    Read off the partial index of unresolved notifications. (Unmatched ones name
    no attempt of ours: nothing to settle, so they are left to the audit.)
    """
    return list(
        ProviderNotification.objects.filter(
            outcome__in=[
                ProviderNotification.Outcome.DEFERRED,
                ProviderNotification.Outcome.REJECTED,
            ],
            resolved_at__isnull=True,
            received_at__lt=received_before,
            pk__gt=after_id,
        )
        .select_related("payment", "refund_attempt__payment")
        .order_by("pk")[:limit]
    )


# --- The operators' gauges (docs/operating.md): few rows, read at scrape time ----------


def stray_captures_unrefunded() -> tuple[float, float]:
    """Captures a statement listed for no attempt of ours, not refunded yet: count, age."""
    return count_and_age(
        StrayCapture.objects.exclude(refund_status=RefundAttemptStatus.SUCCEEDED), "created_at"
    )
