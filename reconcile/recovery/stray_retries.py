"""Declined stray refunds: when the next attempt starts, and late successes notified meanwhile.

A stray capture's declined refund (``strays.py``) is not the end of it: the money
must still go back. After the reconciler's backoff the next attempt takes the
next derived reference (``stray_refund_restart``). Before that, the provider is
asked about every earlier reference, since declined is final for a reference,
not for the money; a refund-success notification about one of them makes the
stray due at once (``stray_late_notified``), and one the provider does not
confirm becomes a case for a person.
"""

from __future__ import annotations

import logging

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from callbacks.models import ProviderNotification
from payments.models import UNSETTLED_REFUND_STATUSES, RefundAttemptStatus
from payments.providers import PaymentProvider, ProviderOutcomeUnknown, RefundStatus
from reconcile.desk.selectors import notifications_held
from reconcile.desk.services import notification_case_open
from reconcile.models import StrayCapture
from reconcile.recovery.strays import stray_refund_find_late, stray_refund_no

logger = logging.getLogger(__name__)


def stray_refund_restart(*, stray: StrayCapture, provider: PaymentProvider) -> bool:
    """Start the next refund attempt of a stray capture whose last one was declined,
    once its backoff is over: a new reference, PENDING. True if this runner started it.

    First the provider is asked about every earlier reference: one it carried out
    after all is the stray's refund, and nothing starts. An unreachable provider
    starts nothing either (the next pass asks again). Then one conditional
    UPDATE on the attempt number: of two runners, one moves it.
    """
    if _found_late(stray=stray, provider=provider) is not False:
        return False  # refunded late after all, or the provider could not be asked
    started = (
        StrayCapture.objects.filter(
            pk=stray.pk,
            refund_status=RefundAttemptStatus.FAILED,
            refund_attempts=stray.refund_attempts,
            next_refund_at__lte=timezone.now(),
        ).update(
            refund_no=stray_refund_no(stray.trade_no, stray.refund_attempts + 1),
            refund_attempts=stray.refund_attempts + 1,
            refund_status=RefundAttemptStatus.PENDING,
            refund_id=None,
            failure_code="",
            next_refund_at=None,
        )
        == 1
    )
    stray.refresh_from_db()
    if started:
        logger.warning(
            "stray capture %s: refund declined, attempt %s as %s",
            stray.trade_no,
            stray.refund_attempts,
            stray.refund_no,
        )
    return started


def stray_late_notifications() -> QuerySet[ProviderNotification]:
    """Unresolved refund-SUCCESS notifications about stray captures' references that no
    open case holds: each a hint that a declined refund was carried out late.

    One a case holds (the provider's query did not confirm it, or a person took
    it) is a person's now: it no longer makes its stray due before its backoff.
    """
    return ProviderNotification.objects.filter(
        event=ProviderNotification.Event.REFUND,
        trade_status=RefundStatus.SUCCESS.value,
        outcome=ProviderNotification.Outcome.UNMATCHED,
        resolved_at__isnull=True,
    ).exclude(pk__in=notifications_held())


def _found_late(*, stray: StrayCapture, provider: PaymentProvider) -> bool | None:
    """``stray_refund_find_late`` over every reference; None if the provider could not
    be asked (logged: the next pass asks again)."""
    try:
        return stray_refund_find_late(stray=stray, provider=provider)
    except ProviderOutcomeUnknown as error:
        logger.warning("stray refund %s: provider unreachable (%s)", stray.refund_no, error)
        return None


def strays_unrefunded() -> list[StrayCapture]:
    """Stray captures whose refund is not settled yet, those whose declined refund is
    due for its next attempt, and declined ones the provider has since notified a
    refund success for that no case holds (a late one: asked about now, not after
    the backoff; asked once, since one the provider does not confirm becomes a case,
    ``stray_late_notified``). Few by nature (read off the whole table)."""
    late = stray_late_notifications().filter(out_trade_no=OuterRef("out_trade_no"))
    return list(
        StrayCapture.objects.filter(
            Q(refund_status__in=UNSETTLED_REFUND_STATUSES)
            | Q(refund_status=RefundAttemptStatus.FAILED, next_refund_at__lte=timezone.now())
            | Q(Exists(late), refund_status=RefundAttemptStatus.FAILED)
        ).order_by("pk")
    )


def stray_backoff_over(stray: StrayCapture) -> bool:
    """A declined stray refund's next attempt may be started (its backoff is over)."""
    return stray.next_refund_at is None or stray.next_refund_at <= timezone.now()


def stray_late_notified(*, stray: StrayCapture, provider: PaymentProvider) -> bool:
    """A declined stray refund, due before its backoff only because a refund success was
    notified for it: ask the provider about every reference now. True if refunded.

    A notification the provider's query does not confirm (mistaken, stale, or
    about another shop's refund) becomes a case for a person, so it is not asked
    about again on every pass; the stray then waits for its backoff like any
    other. An unreachable provider opens nothing (the next pass asks again).
    """
    found = _found_late(stray=stray, provider=provider)
    if found is not False:
        return bool(found)  # refunded late after all, or the provider could not be asked
    for notification in stray_late_notifications().filter(out_trade_no=stray.out_trade_no):
        notification_case_open(
            notification=notification,
            why="the provider's query does not confirm this refund",
        )
    return False
