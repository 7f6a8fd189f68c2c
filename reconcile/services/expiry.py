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
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from orders.errors import OrderNotCancellable
from orders.models import Order
from orders.services import order_cancel, order_products_lock
from payments.services import order_cancel_blocker

# Orders per transaction. The batch's order rows stay locked until it commits, and
# a customer paying one of them waits that long (up to DATABASE_LOCK_TIMEOUT_MS):
# 50 cancels are a fraction of a second, far below it.
BATCH_SIZE = 50


@dataclass(frozen=True)
class ExpireCounts:
    """What one expiry pass did."""

    expired: int = 0
    skipped_live_attempt: int = 0


def run_once(*, batch_size: int = BATCH_SIZE) -> ExpireCounts:
    """Cancel every UNPAID order created more than ORDER_TTL_S ago, batch by batch."""
    created_before = timezone.now() - timedelta(seconds=settings.ORDER_TTL_S)
    expired = skipped = 0
    after_id = 0
    while True:
        with transaction.atomic():
            # SKIP LOCKED: an order a customer is paying or cancelling right now is
            # theirs; if it is still UNPAID and old, the next pass takes it.
            batch = list(
                Order.objects.select_for_update(skip_locked=True)
                .filter(status=Order.Status.UNPAID, created_at__lt=created_before, pk__gt=after_id)
                .order_by("pk")[:batch_size]
            )
            # Every product row the batch will give stock back to, locked by id
            # before the first cancel: releasing order after order would lock them
            # in the orders' order and deadlock with a creation (which goes by id).
            order_products_lock(order_ids=[order.pk for order in batch])
            for order in batch:
                try:
                    # Its own savepoint: a refusal undoes nothing of the others.
                    order_cancel(order=order, blocker=order_cancel_blocker)
                except OrderNotCancellable:
                    skipped += 1
                else:
                    expired += 1
        if len(batch) < batch_size:
            return ExpireCounts(expired=expired, skipped_live_attempt=skipped)
        after_id = batch[-1].pk
