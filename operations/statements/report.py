"""A day's statement report: counts and sums per type and currency, on both sides.

The provider's side is the day's statement lines; ours is the ledger entries
booked that day (UTC). Each row says how many of them matched and how many did
not, so a person sees at once whether the day closed. Read-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.utils.translation import gettext_noop

from edge.money import major_units
from operations.statements.models import (
    LineKind,
    LineOutcome,
    StatementDiscrepancy,
    StatementImport,
    StatementLine,
)
from payments.models import CAPTURE_KINDS, LedgerEntry
from payments.providers import get_provider

# Marked for the books page, which shows them translated; the command prints them as is.
PROVIDER_SIDE, OUR_SIDE = gettext_noop("provider"), gettext_noop("ledger")


@dataclass(frozen=True)
class ReportRow:
    side: str  # "provider" (its statement) or "ledger" (our books)
    kind: str  # charge or refund
    currency: str
    count: int
    total: int
    matched: int
    matched_total: int

    @property
    def unmatched(self) -> int:
        return self.count - self.matched

    @property
    def unmatched_total(self) -> int:
        return self.total - self.matched_total


@dataclass(frozen=True)
class StatementReport:
    day: date
    statement: StatementImport | None  # None: never imported
    rows: list[ReportRow]
    open_discrepancies: int

    @property
    def closed(self) -> bool:
        """Imported, fully matched on both sides, nothing open."""
        return (
            self.statement is not None
            and not self.statement.error
            and self.open_discrepancies == 0
            and all(row.unmatched == 0 for row in self.rows)
        )


def statement_report(*, day: date, provider: str | None = None) -> StatementReport:
    """The day's statement against our books; ``provider`` is a provider's ``name``
    (the configured one's by default)."""
    provider = provider or get_provider().name
    statement = StatementImport.objects.filter(provider=provider, day=day).first()
    rows: list[ReportRow] = []
    if statement is not None:
        lines = StatementLine.objects.filter(statement=statement)
        settled = Q(outcome__in=[LineOutcome.MATCHED, LineOutcome.STRAY])
        rows += [_row(PROVIDER_SIDE, row["kind"], row) for row in _sums(lines, settled)]
    start = datetime.combine(day, time.min, tzinfo=UTC)
    entries = LedgerEntry.objects.filter(created_at__gte=start, created_at__lt=start + timedelta(1))
    listed = StatementLine.objects.filter(outcome=LineOutcome.MATCHED).values("ledger_entry_id")
    for row in _sums(entries, Q(pk__in=listed)):
        kind = LineKind.CHARGE if row["kind"] in CAPTURE_KINDS else LineKind.REFUND
        rows.append(_row(OUR_SIDE, f"{kind} ({row['kind']})", row))
    open_ = StatementDiscrepancy.objects.filter(day=day, resolved_at__isnull=True).count()
    return StatementReport(day=day, statement=statement, rows=rows, open_discrepancies=open_)


def _sums(rows: QuerySet[Any], matched: Q) -> QuerySet[Any, dict[str, Any]]:
    """Count and sum per kind and currency, all of them and those ``matched``."""
    return (
        rows.values("kind", "currency")
        .annotate(
            n=Count("id"),
            total=Sum("amount"),
            matched=Count("id", filter=matched),
            matched_total=Sum("amount", filter=matched, default=0),
        )
        .order_by("kind", "currency")
    )


def _row(side: str, kind: str, row: dict[str, object]) -> ReportRow:
    return ReportRow(
        side=side,
        kind=str(kind),
        currency=str(row["currency"]),
        count=int(row["n"]),  # type: ignore[call-overload]
        total=int(row["total"] or 0),  # type: ignore[call-overload]
        matched=int(row["matched"]),  # type: ignore[call-overload]
        matched_total=int(row["matched_total"] or 0),  # type: ignore[call-overload]
    )


def report_lines(report: StatementReport) -> list[str]:
    """The report as plain text lines (the command prints them)."""
    head = f"statement {report.day}: "
    if report.statement is None:
        return [head + "not imported"]
    s = report.statement
    lines = [
        head
        + f"{s.lines} lines, {s.downloads} download(s), "
        + (f"matched at {s.matched_at:%Y-%m-%d %H:%M:%S}Z" if s.matched_at else "matching not done")
        + (f"; last error: {s.error}" if s.error else ""),
        f"{'side':<9}{'type':<26}{'cur':<5}{'count':>8}{'total':>14}"
        f"{'matched':>9}{'unmatched':>11}{'unmatched sum':>15}",
    ]
    lines += [
        f"{r.side:<9}{r.kind:<26}{r.currency:<5}{r.count:>8}"
        f"{major_units(r.total, r.currency):>14}{r.matched:>9}{r.unmatched:>11}"
        f"{major_units(r.unmatched_total, r.currency):>15}"
        for r in report.rows
    ]
    lines.append(f"open discrepancies of the day: {report.open_discrepancies}")
    lines.append("closed" if report.closed else "NOT closed")
    return lines


@dataclass(frozen=True)
class StatementBooks:
    """What the books page shows of the statements: the latest days, what is open."""

    reports: list[StatementReport]
    open_discrepancies: list[StatementDiscrepancy]
    open_count: int


def statement_books(*, days: int = 3, limit: int = 20) -> StatementBooks:
    """The reports of the latest ``days`` imported days, and the oldest open discrepancies."""
    imported = StatementImport.objects.filter(provider=get_provider().name)
    latest = imported.order_by("-day").values_list("day", flat=True)[:days]
    open_ = StatementDiscrepancy.objects.filter(resolved_at__isnull=True)
    return StatementBooks(
        reports=[statement_report(day=day) for day in latest],
        open_discrepancies=list(open_.order_by("opened_at", "id")[:limit]),
        open_count=open_.count(),
    )
