"""Settle what provider notifications said but the shop could not apply at once.

A notification that contradicts what we hold (DEFERRED: a success for an
attempt we failed or fenced, or for an order that can no longer take it) or
disagrees on the amount (REJECTED) is recorded and answered, and the provider
stops sending it. It is not a dead end: once older than RECONCILE_AFTER_S,
this job asks the provider about the attempt it names — the query is the
truth, the notification only the reason to ask — and settles from that:

    payment_apply_truth: settle, roll forward, or book and refund an orphaned
                         capture (payments/orphans.py)
    refund_settle:       a refund declined at first that went through later

and then marks the notification resolved, with what was done. UNMATCHED
notifications (a reference we hold no attempt for) have nothing to settle
against: they stay unresolved, and the audit reports them for a human.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.utils import timezone

from callbacks.models import ProviderNotification
from observability import context
from payments.models import Payment, Refund
from payments.providers import PaymentProvider, ProviderOutcomeUnknown, get_provider
from payments.refunds import refund_settle
from payments.services import Settlement
from reconcile.desk.isolation import NOTIFICATIONS, ItemGuard
from reconcile.recovery.completion import complete_requests_for
from reconcile.recovery.unsettled_payments import SETTLED, payment_apply_truth
from reconcile.selectors import PAYMENT_RESOURCE, REFUND_RESOURCE, notifications_unresolved

logger = logging.getLogger(__name__)

BATCH_SIZE = 100


@dataclass(frozen=True)
class NotificationCounts:
    examined: int = 0
    resolved: int = 0
    unresolved: int = 0  # the provider could not be asked, or contradicts us: next pass
    failed: int = 0  # raised (counted, backing off; a case after CASE_AFTER_FAILURES)


def _resolve_charge(payment: Payment, provider: PaymentProvider) -> str | None:
    account = provider.query(out_trade_no=payment.out_trade_no)
    if account is None:
        return None  # the provider denies a charge it notified: for a human
    resolution = payment_apply_truth(payment_id=payment.pk, account=account)
    if resolution.value not in SETTLED:
        return None
    complete_requests_for(resource_type=PAYMENT_RESOURCE, ids=[payment.pk], provider=provider)
    return f"provider says {account.status}: {resolution.value}"


def _resolve_refund(refund: Refund, provider: PaymentProvider) -> str | None:
    account = provider.query_refund(out_refund_no=refund.refund_no)
    if account is None:
        return None
    settled = refund_settle(refund_attempt_id=refund.pk, result=account, confirmed=True)
    if settled.outcome is Settlement.CONFLICT:
        return None
    complete_requests_for(resource_type=REFUND_RESOURCE, ids=[refund.pk], provider=provider)
    return f"provider says {account.status}: refund {settled.refund.status}"


@context.isolated
def notification_resolve(
    *, notification: ProviderNotification, provider: PaymentProvider
) -> str | None:
    """Settle the matter a notification raised from the provider's account; the
    resolution in words, or None if it stays open. Outside any transaction."""
    # The notification's references go on every line about it (and to the provider).
    context.bind(
        notify_id=notification.notify_id,
        out_trade_no=notification.out_trade_no,
        out_refund_no=notification.out_refund_no or None,
    )
    try:
        if notification.refund_attempt is not None:
            resolution = _resolve_refund(notification.refund_attempt, provider)
        elif notification.payment is not None:
            resolution = _resolve_charge(notification.payment, provider)
        else:
            return None
    except ProviderOutcomeUnknown as error:
        logger.warning("notification %s: provider unreachable (%s)", notification.pk, error)
        return None
    if resolution is not None:
        # Conditional: of two runners, one records the resolution.
        ProviderNotification.objects.filter(pk=notification.pk, resolved_at__isnull=True).update(
            resolved_at=timezone.now(), resolution=resolution
        )
    return resolution


def run_once(
    *, provider: PaymentProvider | None = None, batch_size: int = BATCH_SIZE
) -> NotificationCounts:
    """Try to resolve every due unresolved notification once."""
    provider = provider or get_provider()
    received_before = timezone.now() - timedelta(seconds=settings.RECONCILE_AFTER_S)
    counts: Counter[str] = Counter()
    guard = ItemGuard(job=NOTIFICATIONS, subject_type="notification")
    after_id = 0
    while batch := notifications_unresolved(
        received_before=received_before, after_id=after_id, limit=batch_size
    ):
        after_id = batch[-1].pk
        for notification in batch:
            if not guard.due(notification.pk):
                continue  # failed lately: backing off
            counts["examined"] += 1
            resolved = guard.run(
                key=notification.pk,
                reference=notification.notify_id,
                work=partial(notification_resolve, notification=notification, provider=provider),
                failed=None,
            )
            counts["resolved" if resolved else "unresolved"] += 1
    counts["failed"] = guard.failed
    return NotificationCounts(**counts)
