"""The daily statement (对账单): import a provider's day exactly once, match it, report.

    statement_reconcile(day)
      1. the import row: INSERT ... ON CONFLICT DO NOTHING on (provider, day) —
         however many beat instances or reruns fire, one row, decided by the
         unique constraint, not by a lock;
      2. download, then import: the statement is read as it streams, outside any
         database transaction (no provider call ever holds one open), into a
         temporary file; only a download that read the whole day is then
         inserted, in one transaction, ON CONFLICT (provider, kind, provider_id)
         DO NOTHING — a rerun adds only the lines it had not seen (today's
         statement still grows), a malformed line or a broken download keeps
         nothing of that download, and a process killed half-way leaves nothing
         half-imported (PostgreSQL rolls the transaction back). A download that
         fails, for any reason, leaves its reason on the import row, which the
         audit reports and a later pass downloads again (``jobs.py``);
      3. matching, batch by batch (``matching.py``, driven by ``settling.py``),
         each batch committed on its own: a crash stops it between batches, and
         the next run takes up the lines still pending, nothing else;
      4. what has no ledger entry is settled by asking the provider, never by
         guessing: a capture of an attempt of ours goes through
         ``payment_settle_from_account`` (roll forward, or book and refund the orphaned
         capture), a refund through ``refund_settle``, a capture of a reference
         we hold no attempt for is refunded (``strays.py``);
      5. ledger entries booked that day before the download began, which no
         statement lists, become ``not-on-statement`` discrepancies; one that a
         later statement lists is resolved by it.

Every line is one of these: matched (to a capture, a refund, a refund's
reversal, a dispute's withdrawal or reinstatement), a stray's, not ours to
match (the merchant's own payouts and fees), or a discrepancy for a person.

Two importers running side by side are harmless: every insert skips what exists,
every update is conditional on the state it expects, and the provider-facing
writes are the idempotent services the reconciler uses.
"""

from __future__ import annotations

import csv
import logging
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import date, datetime
from typing import IO

from django.db import connection, transaction
from django.db.models import F, Func
from django.utils import timezone

from operations.statements.models import LineOutcome, StatementImport, StatementLine
from operations.statements.settling import BATCH_SIZE, StatementCounts, statement_match
from payments.providers import (
    PaymentProvider,
    ProviderOutcomeUnknown,
    StatementEntry,
    StatementMalformed,
    get_provider,
)

logger = logging.getLogger(__name__)


class StatementFailed(Exception):
    """The day's statement could not be imported (unreadable, or the provider is away).

    Nothing of that download was kept; the reason is on the import row too.
    """


def statement_reconcile(
    *, day: date, provider: PaymentProvider | None = None, batch_size: int = BATCH_SIZE
) -> StatementCounts:
    """Import ``day``'s statement (once per provider and day) and match it. See the module."""
    provider = provider or get_provider()
    statement = statement_import_row(day=day, provider=provider.name)
    downloaded, new_lines = statement_download(statement=statement, provider=provider)
    counts = statement_match(statement=statement, provider=provider, batch_size=batch_size)
    return replace(counts, downloaded=downloaded, new_lines=new_lines)


def statement_import_row(*, day: date, provider: str | None = None) -> StatementImport:
    """The one import row of (provider, day): inserted by whoever comes first.

    ``provider`` is a provider's ``name``; the configured one's by default.
    """
    provider = provider or get_provider().name
    StatementImport.objects.bulk_create(
        [StatementImport(provider=provider, day=day)], ignore_conflicts=True
    )
    return StatementImport.objects.get(provider=provider, day=day)


def statement_download(*, statement: StatementImport, provider: PaymentProvider) -> tuple[int, int]:
    """Download the whole statement, then import its lines: (lines read, lines new).

    Raises StatementFailed, having kept nothing of this download and written why
    on the import row, whatever went wrong (a line we cannot read, the provider
    away, a bug): a day that was not read never looks like a day with nothing to
    match.
    """
    # Everything the provider settled before this instant is in what we are about to
    # read: its statement is read after it, and a settlement is committed before the
    # provider answers the charge (or refund) that our ledger entry books.
    started = timezone.now()
    try:
        with tempfile.TemporaryFile("w+", encoding="utf-8", newline="") as spool:
            # The download: provider calls only, no transaction open.
            read = _spool(provider.statement(day=statement.day), spool)
            spool.seek(0)
            # The import: database only, one transaction.
            with transaction.atomic():
                added = _insert_lines(statement, _unspool(spool))
                held = StatementLine.objects.filter(statement=statement).count()
                StatementImport.objects.filter(pk=statement.pk).update(
                    # GREATEST ignores NULL: the first download sets it, a slower older
                    # one finishing last never moves it back.
                    covered_until=Func(F("covered_until"), started, function="GREATEST"),
                    downloads=F("downloads") + 1,
                    lines=held,
                    error="",
                )
    except Exception as error:
        reason = f"{type(error).__name__}: {error}"
        StatementImport.objects.filter(pk=statement.pk).update(error=reason[:2000])
        expected = isinstance(error, StatementMalformed | ProviderOutcomeUnknown)
        logger.error(
            "statement %s %s not imported: %s",
            statement.provider,
            statement.day,
            reason,
            exc_info=None if expected else error,
        )
        raise StatementFailed(reason) from error
    return read, added


def _spool(entries: Iterable[StatementEntry], spool: IO[str]) -> int:
    """Write the entries to ``spool`` as CSV as they arrive; how many. Memory stays flat."""
    writer = csv.writer(spool)
    read = 0
    for entry in entries:
        read += 1
        writer.writerow(
            (
                entry.line,
                entry.kind.value,
                entry.provider_id,
                entry.reference,
                entry.amount,
                entry.currency,
                entry.status,
                entry.settled_at.isoformat(),
            )
        )
    return read


def _unspool(spool: IO[str]) -> Iterator[tuple[object, ...]]:
    """The spooled rows back, typed for COPY."""
    for line_no, kind, provider_id, reference, amount, currency, status, at in csv.reader(spool):
        yield (
            int(line_no),
            kind,
            provider_id,
            reference,
            int(amount),
            currency,
            status,
            datetime.fromisoformat(at),
        )


# The statement's lines are first copied into a temporary table (COPY: the fastest
# way into PostgreSQL), then inserted with one INSERT ... SELECT ... ON CONFLICT DO
# NOTHING: its row count is exactly the lines this run added, even beside another
# importer. The table lives only as long as the download's transaction.
_STAGING = """
    CREATE TEMPORARY TABLE statement_staging (
        line_no integer, kind text, provider_id text, reference text, amount bigint,
        currency text, status text, settled_at timestamptz
    ) ON COMMIT DROP
"""
_FROM_STAGING = """
    INSERT INTO reconcile_statementline
        (statement_id, provider, line_no, kind, provider_id, reference, amount, currency,
         status, settled_at, outcome, note)
    SELECT %(statement)s, %(provider)s, line_no, kind, provider_id, reference, amount,
           currency, status, settled_at, %(pending)s, ''
    FROM statement_staging ORDER BY line_no
    ON CONFLICT (provider, kind, provider_id) DO NOTHING
"""
_COPY = (
    "COPY statement_staging "
    "(line_no, kind, provider_id, reference, amount, currency, status, settled_at) FROM STDIN"
)


def _insert_lines(statement: StatementImport, rows: Iterable[tuple[object, ...]]) -> int:
    """Stage the downloaded rows, then insert the new ones: how many were added.

    One COPY for the whole statement: the driver sends the rows to the server in
    buffers as they are read back from the file, so nothing holds the whole day.
    """
    with connection.cursor() as cursor:
        cursor.execute(_STAGING)
        with cursor.cursor.copy(_COPY) as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute(
            _FROM_STAGING,
            {
                "statement": statement.pk,
                "provider": statement.provider,
                "pending": LineOutcome.PENDING.value,
            },
        )
        return cursor.rowcount
