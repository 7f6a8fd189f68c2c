"""The statement's periodic jobs: the daily import, and the leftovers between days.

- ``daily_run_once``: beat's daily job — yesterday's statement (UTC), the day
  whose statement is final. ``manage.py reconcile_statement --date`` runs any day.
- ``leftovers_run_once``: part of every reconciler pass — what a statement left
  for later, so it does not wait a day: days whose download failed (or never
  finished), downloaded again after the reconciler's backoff; lines pending
  because their attempt was in flight or the provider did not answer, stray
  refunds not settled yet (or declined, due for their next attempt after the
  backoff), unmatched notifications (a capture no attempt of ours recorded,
  which the statement would find tomorrow; the provider's query finds it now),
  and open disputes asked about again (reconcile/recovery/disputes.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db.models import Min, Q
from django.utils import timezone

from callbacks.models import ProviderNotification
from operations.statements.importing import StatementFailed, statement_reconcile
from operations.statements.models import LineOutcome, StatementImport, StatementLine
from operations.statements.settling import StatementCounts, statement_match
from payments.models import Payment, RefundAttemptStatus
from payments.providers import PaymentProvider, ProviderOutcomeUnknown, get_provider
from reconcile.desk.isolation import (
    STATEMENT_DOWNLOADS,
    STATEMENTS,
    STRAY_NOTIFICATIONS,
    STRAY_REFUNDS,
    FailureIsolation,
)
from reconcile.desk.selectors import notifications_held
from reconcile.desk.services import notification_case_open
from reconcile.models import StrayCapture
from reconcile.recovery.disputes import disputes_refresh
from reconcile.recovery.stray_retries import (
    stray_backoff_over,
    stray_late_notified,
    stray_refund_restart,
    strays_unrefunded,
)
from reconcile.recovery.strays import stray_capture_take, stray_notifications_resolve, stray_refund

# Unmatched notifications asked about per pass: each is one provider call, and a
# flood of forged-looking ones (signed, so from the provider) must not stall a pass.
NOTIFICATIONS_PER_PASS = 100


def yesterday() -> date:
    return (timezone.now() - timedelta(days=1)).date()


def daily_run_once(*, provider: PaymentProvider | None = None) -> StatementCounts:
    return statement_reconcile(day=yesterday(), provider=provider)


@dataclass(frozen=True)
class LeftoverCounts:
    downloaded: int = 0  # days whose earlier download had failed, imported now
    statements: int = 0  # statements with pending lines, matched again
    lines_settled: int = 0
    strays_refunded: int = 0
    strays_found: int = 0  # from unmatched notifications, confirmed by the provider
    notifications_resolved: int = 0
    # Items that raised (a statement, a line, a stray, a notification): each counted,
    # backing off, a case after CASE_AFTER_FAILURES; the others went on.
    failed: int = 0
    cases_opened: int = 0  # notifications of a capture the provider does not confirm
    disputes_asked: int = 0  # open disputes asked about again


def leftovers_run_once(*, provider: PaymentProvider | None = None) -> LeftoverCounts:
    provider = provider or get_provider()
    downloaded, downloads_failed = _downloads_again(provider=provider)
    pending = StatementLine.objects.filter(outcome=LineOutcome.PENDING)
    statements = list(
        StatementImport.objects.filter(pk__in=pending.values("statement_id")).order_by("day")
    )
    settled = failed = 0
    isolation = FailureIsolation(job=STATEMENTS, subject_type="statement")
    for statement in statements:
        if not isolation.due(statement.pk):
            continue
        counts = isolation.run(
            key=statement.pk,
            reference=str(statement.day),
            work=partial(statement_match, statement=statement, provider=provider),
            failed=None,
        )
        if counts is not None:
            settled += counts.matched + counts.asked + counts.stray + counts.discrepancies
            failed += counts.failed
    strays_found, cases_opened, notifications_failed = _strays_from_notifications(provider=provider)
    refunded, strays_failed = _strays_refund(provider=provider)
    disputes_asked, disputes_failed = disputes_refresh(provider=provider)
    return LeftoverCounts(
        downloaded=downloaded,
        disputes_asked=disputes_asked,
        statements=len(statements),
        lines_settled=settled,
        strays_refunded=refunded,
        strays_found=strays_found,
        notifications_resolved=stray_notifications_resolve(),
        failed=(
            failed
            + isolation.failed
            + notifications_failed
            + strays_failed
            + downloads_failed
            + disputes_failed
        ),
        cases_opened=cases_opened,
    )


def _downloads_again(*, provider: PaymentProvider) -> tuple[int, int]:
    """Download again every day of this provider whose download failed, or never finished
    (a process killed mid-way), once older than RECONCILE_AFTER_S: (downloaded, failed).

    Each in failure isolation: a day that keeps failing is counted, backs off (the
    reconciler's backoff), and is a case after CASE_AFTER_FAILURES, while its
    reason stays on the import row for the audit.
    """
    quiet_since = timezone.now() - timedelta(seconds=settings.RECONCILE_AFTER_S)
    unread = StatementImport.objects.filter(provider=provider.name, created_at__lt=quiet_since)
    isolation = FailureIsolation(job=STATEMENT_DOWNLOADS, subject_type="statement")
    downloaded = 0
    for statement in unread.filter(~Q(error="") | Q(downloads=0)).order_by("day"):
        if not isolation.due(statement.pk):
            continue
        downloaded += isolation.run(
            key=statement.pk,
            reference=str(statement.day),
            work=partial(_download_again, day=statement.day, provider=provider),
            failed=False,
        )
    return downloaded, isolation.failed


def _download_again(*, day: date, provider: PaymentProvider) -> bool:
    try:
        statement_reconcile(day=day, provider=provider)
    except StatementFailed as failure:
        # Raised on, for the isolation to count; the reason is on the import row already.
        raise RuntimeError(f"statement {day}: {failure}") from failure
    return True


def _strays_refund(*, provider: PaymentProvider) -> tuple[int, int]:
    """Send the refund of every stray capture not refunded yet: (refunded, failed)."""
    isolation = FailureIsolation(job=STRAY_REFUNDS, subject_type="stray")
    refunded = 0
    for stray in strays_unrefunded():
        if not isolation.due(stray.pk):
            continue
        refunded += isolation.run(
            key=stray.pk,
            reference=stray.refund_no,
            work=partial(_stray_refund_next, stray=stray, provider=provider),
            failed=False,
        )
    return refunded, isolation.failed


def _stray_refund_next(*, stray: StrayCapture, provider: PaymentProvider) -> bool:
    if stray.refund_status == RefundAttemptStatus.FAILED and not stray_backoff_over(stray):
        # Due only because a late success was notified: asked about, nothing started.
        return stray_late_notified(stray=stray, provider=provider)
    if stray.refund_status == RefundAttemptStatus.FAILED and not stray_refund_restart(
        stray=stray, provider=provider
    ):
        # An earlier attempt was carried out late (refunded: nothing to start), or
        # another runner started the next attempt (and sends it), or not due yet.
        return stray.refund_status == RefundAttemptStatus.SUCCEEDED
    return stray_refund(stray=stray, provider=provider) == "SUCCEEDED"


def _strays_from_notifications(*, provider: PaymentProvider) -> tuple[int, int, int]:
    """Unmatched SUCCESS notifications of charges: ask the provider, refund if it confirms.

    A notification alone moves no money: ``stray_capture_take`` refunds only what
    the provider's query confirms (and nothing for a reference that is ours). A
    notification the provider does not confirm (forged with the demo's public
    secret, or another shop's) becomes a case for a person, and is not asked
    about again while the case is open: no ERROR line every pass for it.
    Returns (strays found, cases opened, failed).
    """
    due_before = timezone.now() - timedelta(seconds=settings.RECONCILE_AFTER_S)
    unmatched = (
        ProviderNotification.objects.filter(
            outcome=ProviderNotification.Outcome.UNMATCHED,
            resolved_at__isnull=True,
            event=ProviderNotification.Event.CHARGE,
            trade_status="SUCCESS",
            received_at__lt=due_before,
        )
        .exclude(out_trade_no__in=Payment.objects.values("out_trade_no"))
        .exclude(trade_no__in=StrayCapture.objects.values("trade_no"))
        .exclude(pk__in=notifications_held())
    )
    charges = (
        unmatched.values("out_trade_no", "trade_no")
        .annotate(first=Min("pk"))
        .order_by("out_trade_no", "trade_no")[:NOTIFICATIONS_PER_PASS]
    )
    isolation = FailureIsolation(job=STRAY_NOTIFICATIONS, subject_type="notification")
    found = opened = 0
    # A failed question is like an unanswered one: asked again later, no case opened.
    not_answered: StrayCapture | bool | None = False
    for charge in charges:
        if not isolation.due(charge["first"]):
            continue
        stray = isolation.run(
            key=charge["first"],
            reference=charge["out_trade_no"],
            work=partial(_stray_take, charge, provider),
            failed=not_answered,
        )
        if stray is None:
            for notification in unmatched.filter(
                out_trade_no=charge["out_trade_no"], trade_no=charge["trade_no"]
            ):
                opened += (
                    notification_case_open(
                        notification=notification,
                        why="the provider's query does not confirm this capture",
                    )
                    is not None
                )
        found += bool(stray)
    return found, opened, isolation.failed


def _stray_take(charge: dict[str, Any], provider: PaymentProvider) -> StrayCapture | bool | None:
    """The stray capture taken; None: the provider denies it; False: it did not answer."""
    try:
        return stray_capture_take(
            out_trade_no=charge["out_trade_no"], trade_no=charge["trade_no"], provider=provider
        )
    except ProviderOutcomeUnknown:
        return False  # the next pass asks again
