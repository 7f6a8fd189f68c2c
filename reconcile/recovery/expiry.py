"""Expire unpaid orders: after ORDER_TTL_S an UNPAID order is cancelled and its stock
comes back, exactly once, through the same ``order_cancel`` a customer's cancel uses.

Never while a payment attempt is live (pending, unknown or succeeded): the
provider may be charging it right now. ``order_cancel`` asks payments' rule
(``order_cancel_blocker``) under the order's row lock (the lock
``payment_create`` takes too), so the check and the
cancel cannot be split by a pay; the refusals are counted as skipped, and the
reconciler settles the attempt before a later pass looks again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from orders.errors import OrderNotCancellable
from orders.locks import lock_order_unless_busy
from orders.models import Order
from orders.services import order_cancel
from payments.services import order_cancel_blocker
from reconcile.desk.isolation import EXPIRY, FailureIsolation

# Orders read per query. Each is cancelled in its own transaction: one whose cancel
# raises (a bad row, a broken trigger) rolls back alone, and the pass goes on.
BATCH_SIZE = 50


@dataclass(frozen=True)
class ExpireCounts:
    """What one expiry pass did (``failed``: orders whose cancel raised, backing off)."""

    expired: int = 0
    skipped_live_attempt: int = 0
    failed: int = 0


def _expire(*, order_id: int, created_before: datetime) -> str | None:
    """Cancel one old UNPAID order: "expired", "skipped", or None if it is not ours now."""
    with transaction.atomic():
        # SKIP LOCKED: an order a customer is paying or cancelling right now is
        # theirs; if it is still UNPAID and old, the next pass takes it. The lock is
        # the one every writer of an order takes first (orders.locks).
        order = lock_order_unless_busy(order_id=order_id)
        if (
            order is None
            or order.status != Order.Status.UNPAID
            or order.created_at >= created_before
        ):
            return None
        try:
            # The customer's cancel: it locks the order's products by id after the
            # order, the order every writer takes them in.
            order_cancel(order=order, blocker=order_cancel_blocker)
        except OrderNotCancellable:
            return "skipped"
    return "expired"


def run_once(*, batch_size: int = BATCH_SIZE) -> ExpireCounts:
    """Cancel every UNPAID order created more than ORDER_TTL_S ago, one by one."""
    created_before = timezone.now() - timedelta(seconds=settings.ORDER_TTL_S)
    isolation = FailureIsolation(job=EXPIRY, subject_type="order")
    done = {"expired": 0, "skipped": 0}
    after_id = 0
    while batch := list(
        Order.objects.filter(
            status=Order.Status.UNPAID, created_at__lt=created_before, pk__gt=after_id
        )
        .order_by("pk")
        .values_list("pk", "number")[:batch_size]
    ):
        after_id = batch[-1][0]
        for order_id, number in batch:
            if not isolation.due(order_id):
                continue  # failed lately: backing off
            outcome = isolation.run(
                key=order_id,
                reference=number,
                work=partial(_expire, order_id=order_id, created_before=created_before),
                failed=None,
            )
            if outcome is not None:
                done[outcome] += 1
    return ExpireCounts(
        expired=done["expired"], skipped_live_attempt=done["skipped"], failed=isolation.failed
    )
