"""Settling a statement's lines: matched batch by batch, then what has no ledger
entry asked about, and what the ledger holds that no statement lists.

Steps 3 to 5 of ``statement_reconcile`` (operations/statements/importing.py, whose
docstring tells the whole run); ``statement_match`` runs them again for a day
already downloaded (the leftovers job).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import partial

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from operations.statements.matching import match_range_isolated, pending_ranges
from operations.statements.models import (
    DiscrepancyKind,
    LineKind,
    LineOutcome,
    StatementDiscrepancy,
    StatementImport,
    StatementLine,
)
from payments.disputes import DisputeOutcome, dispute_apply
from payments.models import (
    UNSETTLED_REFUND_STATUSES,
    UNSETTLED_STATUSES,
    Payment,
    Refund,
)
from payments.providers import (
    ChargeStatus,
    PaymentProvider,
    ProviderOutcomeUnknown,
    RefundStatus,
)
from payments.refunds import refund_settle
from reconcile.desk.isolation import STATEMENT_LINES, FailureIsolation
from reconcile.recovery.completion import complete_requests_for
from reconcile.recovery.strays import (
    capture_is_an_attempts_own,
    stray_by_refund_no,
    stray_capture_take,
    stray_refund_find_late,
)
from reconcile.recovery.unsettled_payments import payment_settle_from_account
from reconcile.selectors import PAYMENT_RESOURCE, REFUND_RESOURCE

logger = logging.getLogger(__name__)

# Lines per matching batch: four statements per thousand lines, and a batch's
# statements are short.
BATCH_SIZE = 1000


@dataclass(frozen=True)
class StatementCounts:
    """What one run did for one day."""

    day: date
    downloaded: int = 0  # lines in the statement as downloaded
    new_lines: int = 0  # lines this run added (a rerun: what the day gained since)
    matched: int = 0  # lines settled by the set-based matching
    not_ours: int = 0  # the merchant's own money (payouts, fees): recorded, not matched
    asked: int = 0  # lines with no ledger entry, settled by asking the provider
    stray: int = 0  # captures of references we hold no attempt for, refunded
    in_flight: int = 0  # lines whose attempt is younger than RECONCILE_AFTER_S: next run
    unreachable: int = 0  # the provider did not answer about a line: next run
    failed: int = 0  # lines whose settling raised (or is backing off from it): next run
    discrepancies: int = 0  # discrepancies this run opened
    resolved: int = 0  # not-on-statement discrepancies a statement now lists


def statement_match(
    *, statement: StatementImport, provider: PaymentProvider, batch_size: int = BATCH_SIZE
) -> StatementCounts:
    """Match every pending line of the statement, then look for entries it lacks."""
    counts: Counter[str] = Counter()
    isolation = FailureIsolation(job=STATEMENT_LINES, subject_type="line")
    for lo, hi in pending_ranges(statement_id=statement.pk, batch_size=batch_size):
        match = partial(
            match_range_isolated,
            statement_id=statement.pk,
            day=statement.day,
            lo=lo,
            hi=hi,
            isolation=isolation,
        )
        matched, failed = match(now=timezone.now())
        counts += matched
        asked: list[StatementLine] = []
        for line in StatementLine.objects.filter(
            statement=statement, id__range=(lo, hi), outcome=LineOutcome.PENDING
        ).exclude(pk__in=failed):
            if not isolation.due(line.pk):
                counts["failed"] += 1  # failed lately: still pending, backing off
                continue
            # One line that raises stays pending (counted, backing off, a case after
            # CASE_AFTER_FAILURES); the rest of the statement is matched.
            action = isolation.run(
                key=line.pk,
                reference=line.reference,
                work=partial(_settle_unbooked, line=line, provider=provider),
                failed="failed",
            )
            counts[action] += 1
            if action in ("asked", "stray"):
                asked.append(line)
        if asked:
            again, failed = match(now=timezone.now())
            # A line the matching failed on stays pending for failure isolation, not a discrepancy.
            left = [line for line in asked if line.pk not in failed]
            counts["discrepancies"] += again["discrepancies"] + _not_booked(left)
    statement.refresh_from_db()
    if statement.covered_until is not None:
        counts["discrepancies"] += _not_on_statement(statement)
    counts["resolved"] = discrepancies_resolve_by_statements()
    if not StatementLine.objects.filter(statement=statement, outcome=LineOutcome.PENDING).exists():
        StatementImport.objects.filter(pk=statement.pk).update(matched_at=timezone.now())
    return StatementCounts(day=statement.day, **counts)


def _settle_unbooked(*, line: StatementLine, provider: PaymentProvider) -> str:
    """A line with no ledger entry: ask the provider and settle from its answer.

    Returns what happened: ``asked`` (settled from the provider's account, to be
    matched again), ``stray``, ``in_flight``, ``unreachable``, or ``discrepancies``.
    """
    in_flight_since = timezone.now() - timedelta(seconds=settings.RECONCILE_AFTER_S)
    try:
        match line.kind:
            case LineKind.CHARGE:
                return _settle_capture(line=line, provider=provider, since=in_flight_since)
            case LineKind.REFUND:
                return _settle_refund(line=line, provider=provider, since=in_flight_since)
            case LineKind.REFUND_FAILURE:
                return _settle_refund_failure(line=line, provider=provider)
            case LineKind.DISPUTE_WITHDRAWAL | LineKind.DISPUTE_REINSTATEMENT:
                return _settle_dispute(line=line, provider=provider)
        return _open(line, f"a {line.kind} line the shop does not match")
    except ProviderOutcomeUnknown as error:
        logger.warning("statement line %s: provider unreachable (%s)", line.pk, error)
        return "unreachable"


def _settle_capture(*, line: StatementLine, provider: PaymentProvider, since: datetime) -> str:
    if not capture_is_an_attempts_own(out_trade_no=line.reference, trade_no=line.provider_id):
        # No attempt of ours recorded this capture (a lost row, a dashboard charge, a
        # second PaymentIntent naming our reference): asked about by its own id.
        stray = stray_capture_take(
            out_trade_no=line.reference, trade_no=line.provider_id, provider=provider
        )
        if stray is None:
            return _open(line, "the provider's query does not confirm this capture")
        return "stray"
    payment = Payment.objects.get(out_trade_no=line.reference)
    if payment.status in UNSETTLED_STATUSES and payment.updated_at >= since:
        return "in_flight"  # a request is settling it right now
    account = provider.query(out_trade_no=payment.out_trade_no, trade_no=line.provider_id)
    if account is None or account.status is not ChargeStatus.SUCCESS:
        status = account.status if account else "no charge"
        return _open(line, f"asked the provider about {payment.out_trade_no}: {status}")
    resolution = payment_settle_from_account(payment_id=payment.pk, account=account)
    complete_requests_for(resource_type=PAYMENT_RESOURCE, ids=[payment.pk], provider=provider)
    _note(line, f"no ledger entry; asked the provider: {resolution.value}")
    return "asked"


def _settle_refund(*, line: StatementLine, provider: PaymentProvider, since: datetime) -> str:
    refund = Refund.objects.filter(refund_no=line.reference).first()
    if refund is not None:
        if refund.status in UNSETTLED_REFUND_STATUSES and refund.updated_at >= since:
            return "in_flight"
        account = provider.query_refund(out_refund_no=refund.refund_no)
        # REVERSED went through first (the line says so): booked, then reversed.
        if account is None or account.status not in (RefundStatus.SUCCESS, RefundStatus.REVERSED):
            status = account.status if account else "no refund"
            return _open(line, f"asked the provider about {refund.refund_no}: {status}")
        settled = refund_settle(refund_attempt_id=refund.pk, result=account, confirmed=True)
        complete_requests_for(resource_type=REFUND_RESOURCE, ids=[refund.pk], provider=provider)
        _note(line, f"no ledger entry; asked the provider: {settled.outcome.value}")
        return "asked"
    stray = stray_by_refund_no(provider=line.provider, refund_no=line.reference)
    if stray is not None:
        # Any reference the stray ever used: the provider lists a refund it carried out
        # late as well as the latest attempt. Asking raises ProviderOutcomeUnknown if
        # the provider is away: the line stays pending ("unreachable"), never a
        # discrepancy for what a second try would settle.
        stray_refund_find_late(stray=stray, provider=provider)
        return "stray"
    return _open(
        line,
        f"refund {line.provider_id} ({line.reference}): no refund attempt of ours",
        kind=DiscrepancyKind.UNKNOWN_REFUND,
    )


def _settle_refund_failure(*, line: StatementLine, provider: PaymentProvider) -> str:
    """A refund that failed after it succeeded, and our books do not say so yet: the
    provider's account of the refund books the reversal (``refund_settle``)."""
    refund = Refund.objects.filter(refund_no=line.reference).first()
    if refund is None:
        return _open(
            line,
            f"refund {line.provider_id} ({line.reference}) failed: no refund attempt of ours",
            kind=DiscrepancyKind.UNKNOWN_REFUND,
        )
    account = provider.query_refund(out_refund_no=refund.refund_no)
    if account is None or account.status is not RefundStatus.REVERSED:
        status = account.status if account else "no refund"
        return _open(line, f"asked the provider about {refund.refund_no}: {status}")
    settled = refund_settle(refund_attempt_id=refund.pk, result=account, confirmed=True)
    complete_requests_for(resource_type=REFUND_RESOURCE, ids=[refund.pk], provider=provider)
    _note(line, f"no reversal booked; asked the provider: {settled.outcome.value}")
    return "asked"


def _settle_dispute(*, line: StatementLine, provider: PaymentProvider) -> str:
    """A dispute's money our books do not hold yet: the provider's account of the
    dispute books it (``dispute_apply``)."""
    account = provider.query_dispute(dispute_id=line.provider_id)
    if account is None:
        return _open(line, f"asked the provider about dispute {line.provider_id}: none")
    outcome, _ = dispute_apply(account=account)
    if outcome is DisputeOutcome.UNKNOWN_PAYMENT:
        return _open(
            line,
            f"dispute {line.provider_id} of charge {account.trade_no}: no payment of ours",
            kind=DiscrepancyKind.UNKNOWN_DISPUTE,
        )
    _note(line, f"no dispute entry; asked the provider: {outcome.value}")
    return "asked"


def _note(line: StatementLine, note: str) -> None:
    StatementLine.objects.filter(pk=line.pk).update(note=note)


def _open(line: StatementLine, reason: str, *, kind: str = DiscrepancyKind.NOT_BOOKED) -> str:
    """Mark the line a discrepancy (if still pending) and open one for it, once."""
    with transaction.atomic():
        moved = StatementLine.objects.filter(pk=line.pk, outcome=LineOutcome.PENDING).update(
            outcome=LineOutcome.DISCREPANCY, note=reason, matched_at=timezone.now()
        )
        if moved:
            StatementDiscrepancy.objects.bulk_create(
                [
                    StatementDiscrepancy(
                        kind=kind,
                        day=line.settled_at.date(),
                        line=line,
                        reason=f"{line.kind} {line.provider_id} of {line.amount} "
                        f"{line.currency}: {reason}",
                    )
                ],
                ignore_conflicts=True,
            )
    return "discrepancies"


def _not_booked(lines: list[StatementLine]) -> int:
    """Lines that asking the provider settled, but that still meet no ledger entry."""
    left = StatementLine.objects.filter(
        pk__in=[line.pk for line in lines], outcome=LineOutcome.PENDING
    )
    for line in left:
        _open(line, f"{line.note or 'settled from the provider'}, still no ledger entry")
    return len(left)


def _not_on_statement(statement: StatementImport) -> int:
    """Open a discrepancy for each ledger entry of the day that no statement lists.

    Only entries booked before the latest complete download began: the provider
    had settled those (see ``statement_download``), so if it does not list them,
    it does not know them. A booking just after midnight of a charge settled
    just before is listed by the day before; importing that day resolves it.
    """
    start = datetime.combine(statement.day, time.min, tzinfo=UTC)
    assert statement.covered_until is not None
    end = min(start + timedelta(days=1), statement.covered_until)
    sql = """
        INSERT INTO reconcile_statementdiscrepancy
            (kind, day, line_id, ledger_entry_id, reason, opened_at, resolution)
        SELECT %(kind)s, %(day)s, NULL, e.id,
               e.kind || ' ' || COALESCE(e.refund_id, d.dispute_id, e.trade_no) || ' of '
               || e.amount
               || ' ' || e.currency || ' (payment ' || e.payment_id
               || '): the provider lists it on no statement',
               %(now)s, ''
        FROM payments_ledgerentry AS e
        LEFT JOIN payments_dispute AS d ON d.id = e.dispute_id
        WHERE e.created_at >= %(start)s AND e.created_at < %(end)s
          AND NOT EXISTS (
              SELECT 1 FROM reconcile_statementline AS l WHERE l.ledger_entry_id = e.id)
          -- Listed, but left pending (its matching failed, or is in flight): it is on
          -- the statement, and the line's own failure isolation or next run settles it.
          AND NOT EXISTS (
              SELECT 1 FROM reconcile_statementline AS p
              WHERE p.outcome = %(pending)s
                AND p.provider_id = COALESCE(e.refund_id, d.dispute_id, e.trade_no))
        ON CONFLICT DO NOTHING
    """
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            {
                "kind": DiscrepancyKind.NOT_ON_STATEMENT.value,
                "pending": LineOutcome.PENDING.value,
                "day": statement.day,
                "now": timezone.now(),
                "start": start,
                "end": end,
            },
        )
        return cursor.rowcount


def discrepancies_resolve_by_statements() -> int:
    """Resolve open not-on-statement discrepancies whose entry a statement now lists."""
    sql = """
        UPDATE reconcile_statementdiscrepancy AS d
        SET resolved_at = %(now)s,
            resolution = 'listed by the statement of ' || s.day || ', line ' || l.line_no
        FROM reconcile_statementline AS l
        JOIN reconcile_statementimport AS s ON s.id = l.statement_id
        WHERE d.kind = %(kind)s AND d.resolved_at IS NULL
          AND l.ledger_entry_id = d.ledger_entry_id AND l.outcome = %(matched)s
    """
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            {
                "now": timezone.now(),
                "kind": DiscrepancyKind.NOT_ON_STATEMENT.value,
                "matched": LineOutcome.MATCHED.value,
            },
        )
        return cursor.rowcount
