"""Settle what provider notifications said but the shop could not apply at once.

A notification that contradicts what we hold (DEFERRED: a success for an
attempt we failed or fenced, or for an order that can no longer take it; a
refund that failed after it succeeded; a dispute our books disagree with) or
disagrees on the amount (REJECTED) is recorded and answered, and the provider
stops sending it. It is not a dead end: once older than RECONCILE_AFTER_S,
this job asks the provider about what it names — the charge (by the
provider's id the notification carries), the refund, the dispute; the query is
the truth, the notification only the reason to ask — and settles from that:

    payment_settle_from_account: settle, roll forward, or book and refund an orphaned
                         capture (payments/orphans.py)
    stray_capture_take:  a second capture naming the reference of an attempt
                         that has its own: booked as a stray, and refunded
    refund_settle:       a refund declined at first that went through later, or
                         one that went through and was reversed (payments/reversals.py)
    dispute_apply:       a dispute's status and money (payments/disputes.py)

and then marks the notification resolved, with what was done. It is asked
about once: when the provider's answer does not settle it either (it
contradicts the books, or denies what it notified), the notification becomes a
``contradicted`` case for a person and is not asked about again while the case
is open. (A provider that does not answer is asked again at the next pass.)
UNMATCHED notifications (a reference we hold no attempt for) have nothing to
settle against: they are the statement's and the desk's (``operations/statements/jobs.py``).
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
from payments.disputes import DisputeOutcome, dispute_apply
from payments.models import Payment, Refund
from payments.providers import ChargeStatus, PaymentProvider, ProviderOutcomeUnknown, get_provider
from payments.refunds import refund_settle
from payments.services import Settlement
from reconcile.desk.isolation import NOTIFICATIONS, FailureIsolation
from reconcile.desk.models import CaseKind
from reconcile.desk.selectors import notifications_held
from reconcile.desk.services import case_open
from reconcile.recovery.completion import complete_requests_for
from reconcile.recovery.strays import stray_capture_take
from reconcile.recovery.unsettled_payments import SETTLED, payment_settle_from_account
from reconcile.selectors import PAYMENT_RESOURCE, REFUND_RESOURCE, notifications_unresolved

logger = logging.getLogger(__name__)

BATCH_SIZE = 100


@dataclass(frozen=True)
class NotificationCounts:
    examined: int = 0
    resolved: int = 0
    unresolved: int = 0  # the provider could not be asked, or contradicts us: next pass
    failed: int = 0  # raised (counted, backing off; a case after CASE_AFTER_FAILURES)


class _Contradicted(Exception):
    """The provider's own answer does not settle what it notified: for a person."""


def _resolve_charge(
    notification: ProviderNotification, payment: Payment, provider: PaymentProvider
) -> str:
    # Asked about the charge the notification names, which may not be the one the
    # attempt recorded (a second capture naming our reference).
    account = provider.query(
        out_trade_no=payment.out_trade_no, trade_no=notification.trade_no or None
    )
    if account is None:
        raise _Contradicted(f"the provider holds no charge {notification.trade_no}")
    if (
        account.status is ChargeStatus.SUCCESS
        and payment.trade_no
        and account.trade_no != payment.trade_no
    ):
        assert account.trade_no is not None
        stray = stray_capture_take(
            out_trade_no=payment.out_trade_no, trade_no=account.trade_no, provider=provider
        )
        if stray is None:
            raise _Contradicted(f"the provider does not confirm capture {account.trade_no}")
        return (
            f"a second capture {stray.trade_no} of {payment.out_trade_no}: "
            f"stray, refund {stray.refund_status}"
        )
    resolution = payment_settle_from_account(payment_id=payment.pk, account=account)
    if resolution.value not in SETTLED:
        raise _Contradicted(f"provider says {account.status}: {resolution.value}")
    complete_requests_for(resource_type=PAYMENT_RESOURCE, ids=[payment.pk], provider=provider)
    return f"provider says {account.status}: {resolution.value}"


def _resolve_refund(refund: Refund, provider: PaymentProvider) -> str:
    account = provider.query_refund(out_refund_no=refund.refund_no)
    if account is None:
        raise _Contradicted(f"the provider holds no refund {refund.refund_no}")
    settled = refund_settle(refund_attempt_id=refund.pk, result=account, confirmed=True)
    if settled.outcome is Settlement.CONFLICT:
        raise _Contradicted(f"provider says {account.status}: {settled.reason}")
    complete_requests_for(resource_type=REFUND_RESOURCE, ids=[refund.pk], provider=provider)
    return f"provider says {account.status}: refund {settled.refund.status}"


def _resolve_dispute(notification: ProviderNotification, provider: PaymentProvider) -> str:
    account = provider.query_dispute(dispute_id=notification.dispute_id)
    if account is None:
        raise _Contradicted(f"the provider holds no dispute {notification.dispute_id}")
    outcome, dispute = dispute_apply(account=account)
    if outcome in (DisputeOutcome.CONFLICT, DisputeOutcome.UNKNOWN_PAYMENT):
        raise _Contradicted(f"provider says dispute {account.status}: {outcome.value}")
    assert dispute is not None
    return f"provider says dispute {account.status}: {outcome.value}"


@context.isolated
def notification_resolve(
    *, notification: ProviderNotification, provider: PaymentProvider
) -> str | None:
    """Settle the matter a notification raised from the provider's account; the
    resolution in words, or None if it stays open (the provider did not answer,
    or its answer contradicts the books: then a case). Outside any transaction."""
    # The notification's references go on every line about it (and to the provider).
    context.bind(
        notify_id=notification.notify_id,
        out_trade_no=notification.out_trade_no,
        out_refund_no=notification.out_refund_no or None,
    )
    try:
        if notification.event == ProviderNotification.Event.DISPUTE:
            resolution = _resolve_dispute(notification, provider)
        elif notification.refund_attempt is not None:
            resolution = _resolve_refund(notification.refund_attempt, provider)
        elif notification.payment is not None:
            resolution = _resolve_charge(notification, notification.payment, provider)
        else:
            return None
    except ProviderOutcomeUnknown as error:
        logger.warning("notification %s: provider unreachable (%s)", notification.pk, error)
        return None
    except _Contradicted as contradiction:
        logger.error("notification %s: %s; a case for a person", notification.pk, contradiction)
        _contradicted_case_open(notification, why=str(contradiction))
        return None
    if resolution is not None:
        # Conditional: of two runners, one records the resolution.
        ProviderNotification.objects.filter(pk=notification.pk, resolved_at__isnull=True).update(
            resolved_at=timezone.now(), resolution=resolution
        )
    return resolution


def _contradicted_case_open(notification: ProviderNotification, *, why: str) -> int | None:
    """Held by a case from now on: ``run_once`` asks no more about it while it is open."""
    reference = notification.out_refund_no or notification.dispute_id or notification.out_trade_no
    return case_open(
        kind=CaseKind.CONTRADICTED,
        subject_type="notification",
        subject_id=notification.pk,
        reference=reference,
        summary=f"notification {notification.notify_id} ({notification.event} {reference} "
        f"{notification.trade_status}, {notification.outcome}): asked the provider once: "
        f"{why}",
    )


def run_once(
    *, provider: PaymentProvider | None = None, batch_size: int = BATCH_SIZE
) -> NotificationCounts:
    """Try to resolve every due unresolved notification once."""
    provider = provider or get_provider()
    received_before = timezone.now() - timedelta(seconds=settings.RECONCILE_AFTER_S)
    counts: Counter[str] = Counter()
    isolation = FailureIsolation(job=NOTIFICATIONS, subject_type="notification")
    after_id = 0
    held = set(notifications_held().values_list("subject_id", flat=True))
    while batch := notifications_unresolved(
        received_before=received_before, after_id=after_id, limit=batch_size
    ):
        after_id = batch[-1].pk
        for notification in batch:
            if notification.pk in held:
                continue  # a person's: asked once, contradicted (or taken by hand)
            if not isolation.due(notification.pk):
                continue  # failed lately: backing off
            counts["examined"] += 1
            resolved = isolation.run(
                key=notification.pk,
                reference=notification.notify_id,
                work=partial(notification_resolve, notification=notification, provider=provider),
                failed=None,
            )
            counts["resolved" if resolved else "unresolved"] += 1
    counts["failed"] = isolation.failed
    return NotificationCounts(**counts)
