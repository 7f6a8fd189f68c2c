"""Matching a statement's lines against the ledger: set-based, batch by batch.

A batch is a range of pending lines (by id). A few statements settle the common
cases for the whole range at once, however many lines it holds:

1. each kind of line meeting its ledger entry: a charge its capture (by
   ``trade_no``), a refund its refund entry (by ``refund_id``), a
   refund_failure its reversal (by ``refund_id``), a dispute's withdrawal or
   reinstatement its entry of that direction (by the dispute's id): MATCHED
   where amount and currency agree, else DISCREPANCY with an
   ``amount-differs`` discrepancy inserted by the same statement;
2. lines of stray captures and their refunds (``strays.py``): STRAY;
3. ``other`` lines (the merchant's payouts, the provider's fees): NOT_OURS,
   recorded and not matched against payments.

Every UPDATE is conditional on ``outcome = 'pending'`` and every INSERT skips
a discrepancy that exists, so a batch run twice (two importers, a crash and a
retry) changes nothing the second time. What is left pending has no ledger
entry at all; ``statements.py`` asks the provider about each of those (the
exceptions, few on any real day) and runs the batch's statements again.

If a batch's statements fail (one line the database refuses fails the whole
UPDATE), ``match_range_isolated`` matches that batch line by line through the
desk's failure isolation, so only the bad line stays pending and the rest of the day settles.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from datetime import date, datetime
from functools import partial
from typing import Any

from django.db import DatabaseError, connection, transaction

from operations.statements.models import DiscrepancyKind, LineKind, LineOutcome, StatementLine
from payments.models import CAPTURE_KINDS, REFUND_KINDS, REVERSAL_KINDS, LedgerKind
from reconcile.desk.isolation import FailureIsolation

logger = logging.getLogger(__name__)

# The provider's id of a ledger entry, as its statement line names it.
_TRADE_NO = "e.trade_no"
_REFUND_ID = "e.refund_id"
_DISPUTE_ID = "(SELECT d.dispute_id FROM payments_dispute AS d WHERE d.id = e.dispute_id)"

# The join of a line to its ledger entry, per kind: the provider's id is unique
# per kind in the ledger (partial unique indexes), so a line meets at most one.
_ENTRY_OF = {
    LineKind.CHARGE: (_TRADE_NO, CAPTURE_KINDS),
    LineKind.REFUND: (_REFUND_ID, REFUND_KINDS),
    LineKind.REFUND_FAILURE: (_REFUND_ID, REVERSAL_KINDS),
    LineKind.DISPUTE_WITHDRAWAL: (_DISPUTE_ID, (LedgerKind.DISPUTE_WITHDRAWAL,)),
    LineKind.DISPUTE_REINSTATEMENT: (_DISPUTE_ID, (LedgerKind.DISPUTE_REINSTATEMENT,)),
}

# A pending line of the batch, joined to the ledger entry of its kind and provider id.
_PENDING_WITH_ENTRY = """
    FROM payments_ledgerentry AS e
    WHERE l.statement_id = %(statement)s AND l.id BETWEEN %(lo)s AND %(hi)s
      AND l.outcome = %(pending)s AND l.kind = %(kind)s
      AND e.kind = ANY(%(entry_kinds)s) AND {provider_id} = l.provider_id
"""

# One statement per kind: every pending line that meets its entry is settled —
# MATCHED when they agree, DISCREPANCY when the amount or the currency differs,
# with its discrepancy inserted by the same statement. Returns both counts.
_SETTLE = """
    WITH settled AS (
        UPDATE reconcile_statementline AS l
        SET outcome = CASE WHEN e.amount = l.amount AND e.currency = l.currency
                           THEN %(matched)s ELSE %(discrepancy)s END,
            ledger_entry_id = e.id, matched_at = %(now)s
        {pending_with_entry}
        RETURNING l.id, l.outcome, e.id AS entry_id, l.kind, l.provider_id, l.amount,
                  l.currency, e.amount AS booked, e.currency AS booked_currency
    ), opened AS (
        INSERT INTO reconcile_statementdiscrepancy
            (kind, day, line_id, ledger_entry_id, reason, opened_at, resolution)
        SELECT %(amount_differs)s, %(day)s, id, entry_id,
               kind || ' ' || provider_id || ': the provider settled ' || amount || ' '
               || currency || ', our ledger says ' || booked || ' ' || booked_currency,
               %(now)s, ''
        FROM settled WHERE outcome = %(discrepancy)s
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM settled WHERE outcome = %(matched)s),
           (SELECT count(*) FROM opened)
"""

# Stray captures (no attempt of ours): the charge line, and the refund that gave it back.
_STRAY = """
    UPDATE reconcile_statementline AS l
    SET outcome = %(stray)s, stray_id = s.id, matched_at = %(now)s
    FROM reconcile_straycapture AS s
    WHERE l.statement_id = %(statement)s AND l.id BETWEEN %(lo)s AND %(hi)s
      AND l.outcome = %(pending)s AND l.kind = %(kind)s AND s.provider = l.provider
      AND s.{id_column} = l.provider_id AND s.amount = l.amount AND s.currency = l.currency
      {condition}
"""

_STRAY_OF = (
    (LineKind.CHARGE, "trade_no", ""),
    (LineKind.REFUND, "refund_id", "AND s.refund_status = 'SUCCEEDED'"),
)

# The merchant's own money (payouts, fees): recorded, not matched against payments.
_NOT_OURS = """
    UPDATE reconcile_statementline AS l
    SET outcome = %(not_ours)s, matched_at = %(now)s
    WHERE l.statement_id = %(statement)s AND l.id BETWEEN %(lo)s AND %(hi)s
      AND l.outcome = %(pending)s AND l.kind = %(other)s
"""


def match_range(*, statement_id: int, day: date, lo: int, hi: int, now: datetime) -> Counter[str]:
    """Match the pending lines with ids in [lo, hi]: how many ended ``matched``,
    ``discrepancies`` (amount differs), ``stray`` and ``not_ours``. A statement per
    kind of line."""
    params: dict[str, Any] = {
        "statement": statement_id,
        "lo": lo,
        "hi": hi,
        "now": now,
        "day": day,
        # Plain strings: the driver would send an enum member by its name.
        "pending": LineOutcome.PENDING.value,
        "matched": LineOutcome.MATCHED.value,
        "discrepancy": LineOutcome.DISCREPANCY.value,
        "stray": LineOutcome.STRAY.value,
        "not_ours": LineOutcome.NOT_OURS.value,
        "other": LineKind.OTHER.value,
        "amount_differs": DiscrepancyKind.AMOUNT_DIFFERS.value,
    }
    counts: Counter[str] = Counter()
    with connection.cursor() as cursor:
        for kind, (provider_id, entry_kinds) in _ENTRY_OF.items():
            kind_params: dict[str, Any] = {
                **params,
                "kind": kind.value,
                "entry_kinds": [entry_kind.value for entry_kind in entry_kinds],
            }
            join = _PENDING_WITH_ENTRY.format(provider_id=provider_id)
            cursor.execute(_SETTLE.format(pending_with_entry=join), kind_params)
            matched, opened = cursor.fetchone()
            counts["matched"] += matched
            counts["discrepancies"] += opened
        for kind, id_column, condition in _STRAY_OF:
            cursor.execute(
                _STRAY.format(id_column=id_column, condition=condition),
                {**params, "kind": kind.value},
            )
            counts["stray"] += cursor.rowcount
        cursor.execute(_NOT_OURS, params)
        counts["not_ours"] += cursor.rowcount
    return counts


def match_range_isolated(
    *, statement_id: int, day: date, lo: int, hi: int, now: datetime, isolation: FailureIsolation
) -> tuple[Counter[str], set[int]]:
    """``match_range``, and if its set-based statements fail (one line the database
    refuses fails the whole statement), the range again line by line through the
    isolation: only the bad line is left pending (counted, backing off, a case after
    CASE_AFTER_FAILURES). Returns the counts and the ids of the lines left failed
    (counted in ``failed``), which the caller does not settle any further this run.
    """
    bulk = partial(match_range, statement_id=statement_id, day=day, now=now)
    try:
        with transaction.atomic():  # the four statements, all or none
            return bulk(lo=lo, hi=hi), set()
    except DatabaseError:
        logger.warning(
            "statement %s lines %s..%s not matched together; line by line", statement_id, lo, hi
        )
    counts: Counter[str] = Counter()
    failed: set[int] = set()
    pending = StatementLine.objects.filter(
        statement_id=statement_id, id__range=(lo, hi), outcome=LineOutcome.PENDING
    )
    for line_id, reference in pending.order_by("id").values_list("id", "reference"):
        matched = None
        if isolation.due(line_id):
            matched = isolation.run(
                key=line_id,
                reference=reference,
                work=partial(_atomic, partial(bulk, lo=line_id, hi=line_id)),
                failed=None,
            )
        if matched is None:  # it raised now, or lately (backing off)
            failed.add(line_id)
            counts["failed"] += 1
        else:
            counts += matched
    return counts, failed


def _atomic(work: Callable[[], Counter[str]]) -> Counter[str]:
    with transaction.atomic():
        return work()


def pending_ranges(*, statement_id: int, batch_size: int) -> list[tuple[int, int]]:
    """The pending lines of a statement cut into [lo, hi] ranges of ``batch_size`` lines.

    One query over the partial index of pending lines; the ranges are walked
    afterwards, so lines left pending (in flight) are not met again this run.
    """
    ids = list(
        StatementLine.objects.filter(statement_id=statement_id, outcome=LineOutcome.PENDING)
        .order_by("id")
        .values_list("id", flat=True)
    )
    return [
        (ids[start], ids[min(start + batch_size, len(ids)) - 1])
        for start in range(0, len(ids), batch_size)
    ]
