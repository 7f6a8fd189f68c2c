"""The statement's periodic jobs: the daily import, and the leftovers between days.

- ``daily_run_once``: beat's daily job — yesterday's statement (UTC), the day
  whose statement is final. ``manage.py reconcile_statement --date`` runs any day.
- ``leftovers_run_once``: part of every reconciler pass — what a statement left
  for later, so it does not wait a day: lines pending because their attempt was
  in flight or the provider did not answer, stray refunds not settled yet (or
  declined, due for their next attempt after the backoff), and
  unmatched notifications (a capture for a reference we hold no attempt for,
  which the statement would find tomorrow; the provider's query finds it now).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from django.conf import settings
from django.utils import timezone

from callbacks.models import ProviderNotification
from payments.models import Payment, RefundAttemptStatus
from payments.providers import PaymentProvider, ProviderOutcomeUnknown, get_provider
from reconcile.models import LineOutcome, StatementImport, StatementLine, StrayCapture
from reconcile.services.statements import StatementCounts, statement_match, statement_reconcile
from reconcile.services.strays import (
    stray_capture_take,
    stray_notifications_resolve,
    stray_refund,
    stray_refund_restart,
    strays_unrefunded,
)

# Unmatched notifications asked about per pass: each is one provider call, and a
# flood of forged-looking ones (signed, so from the provider) must not stall a pass.
NOTIFICATIONS_PER_PASS = 100


def yesterday() -> date:
    return (timezone.now() - timedelta(days=1)).date()


def daily_run_once(*, provider: PaymentProvider | None = None) -> StatementCounts:
    return statement_reconcile(day=yesterday(), provider=provider)


@dataclass(frozen=True)
class LeftoverCounts:
    statements: int = 0  # statements with pending lines, matched again
    lines_settled: int = 0
    strays_refunded: int = 0
    strays_found: int = 0  # from unmatched notifications, confirmed by the provider
    notifications_resolved: int = 0


def leftovers_run_once(*, provider: PaymentProvider | None = None) -> LeftoverCounts:
    provider = provider or get_provider()
    pending = StatementLine.objects.filter(outcome=LineOutcome.PENDING)
    statements = list(
        StatementImport.objects.filter(pk__in=pending.values("statement_id")).order_by("day")
    )
    settled = 0
    for statement in statements:
        counts = statement_match(statement=statement, provider=provider)
        settled += counts.matched + counts.asked + counts.stray + counts.discrepancies
    strays_found = _strays_from_notifications(provider=provider)
    refunded = 0
    for stray in strays_unrefunded():
        if stray.refund_status == RefundAttemptStatus.FAILED and not stray_refund_restart(
            stray=stray, provider=provider
        ):
            # An earlier attempt was carried out late (refunded: nothing to start), or
            # another runner started the next attempt (and sends it), or not due yet.
            refunded += stray.refund_status == RefundAttemptStatus.SUCCEEDED
            continue
        refunded += stray_refund(stray=stray, provider=provider) == "SUCCEEDED"
    return LeftoverCounts(
        statements=len(statements),
        lines_settled=settled,
        strays_refunded=refunded,
        strays_found=strays_found,
        notifications_resolved=stray_notifications_resolve(),
    )


def _strays_from_notifications(*, provider: PaymentProvider) -> int:
    """Unmatched SUCCESS notifications of charges: ask the provider, refund if it confirms.

    A notification alone moves no money: ``stray_capture_take`` refunds only what
    the provider's query confirms (and nothing for a reference that is ours).
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
        .exclude(out_trade_no__in=StrayCapture.objects.values("out_trade_no"))
        .values_list("out_trade_no", "trade_no")
        .distinct()
        .order_by("out_trade_no", "trade_no")[:NOTIFICATIONS_PER_PASS]
    )
    found = 0
    for out_trade_no, trade_no in unmatched:
        try:
            found += (
                stray_capture_take(out_trade_no=out_trade_no, trade_no=trade_no, provider=provider)
                is not None
            )
        except ProviderOutcomeUnknown:
            continue  # the next pass asks again
    return found
