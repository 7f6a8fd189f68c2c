"""The daily statement (对账单): every money movement of one UTC day, as CSV.

What a real provider publishes for its merchants to close their books against.
One line per money movement that happened that day: a successful charge (by
``paid_at``), a refund that went through (by ``refunded_at``, reversed since or
not), a refund that failed after it went through (``refund_failure``, by
``reversed_at``), a dispute that withdrew a charge's money (``dispute_withdrawal``,
by ``opened_at``: its provider id is the dispute's, its reference the charge's)
and one won that reinstated it (``dispute_reinstatement``). Declines and fences
moved no money and are not listed. Each type comes in turn, in that order, and in
settlement order within it, so two downloads of a finished day are the same
bytes, and a download of today is the earlier one with lines added at the end
of each part.

Streamed: rows are read through a server-side cursor in chunks and written out
as they come, so a statement of millions of lines never sits in memory, on
either side of the wire.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta

from demo.sandbox.errors import StatementDateInvalid
from demo.sandbox.selectors import (
    statement_charges,
    statement_dispute_reinstatements,
    statement_dispute_withdrawals,
    statement_refund_failures,
    statement_refunds,
)

# The columns, in order (part of the provider's contract).
COLUMNS = (
    "type",
    "provider_id",
    "merchant_reference",
    "amount",
    "currency",
    "status",
    "settled_at",
)
CHARGE, REFUND, REFUND_FAILURE = "charge", "refund", "refund_failure"
DISPUTE_WITHDRAWAL, DISPUTE_REINSTATEMENT = "dispute_withdrawal", "dispute_reinstatement"
# Every line is money that moved: its status is always this.
SETTLED = "SUCCESS"
# Rows fetched from the cursor per round trip: large enough to stream fast, small
# enough that memory stays flat whatever the day's size.
CHUNK_ROWS = 2000


def statement_day(raw: str) -> date:
    """The day a URL names; strictly ``YYYY-MM-DD`` (no week dates, no times)."""
    if len(raw) != 10 or raw[4] != "-" or raw[7] != "-":
        raise StatementDateInvalid()
    try:
        return date.fromisoformat(raw)
    except ValueError as error:
        raise StatementDateInvalid() from error


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """[start, end) of the UTC day."""
    start = datetime.combine(day, time.min, tzinfo=UTC)
    return start, start + timedelta(days=1)


class _Line:
    """A file-like sink for csv.writer that hands back what it was given."""

    def write(self, text: str) -> str:
        return text


def statement_csv(day: date) -> Iterator[str]:
    """The statement of ``day`` as CSV text, header first, in pieces of CHUNK_ROWS lines.

    A piece per line would be a socket write (and an HTTP chunk) per line; a
    piece per CHUNK_ROWS keeps the writes few and the memory flat.
    """
    writer = csv.writer(_Line(), lineterminator="\n")
    start, end = day_bounds(day)
    piece = [writer.writerow(COLUMNS)]
    for kind, rows in (
        (CHARGE, statement_charges(start=start, end=end)),
        (REFUND, statement_refunds(start=start, end=end)),
        (REFUND_FAILURE, statement_refund_failures(start=start, end=end)),
        (DISPUTE_WITHDRAWAL, statement_dispute_withdrawals(start=start, end=end)),
        (DISPUTE_REINSTATEMENT, statement_dispute_reinstatements(start=start, end=end)),
    ):
        for row in rows.iterator(chunk_size=CHUNK_ROWS):
            piece.append(writer.writerow(_line(kind, *row)))
            if len(piece) >= CHUNK_ROWS:
                yield "".join(piece)
                piece = []
    if piece:
        yield "".join(piece)


def _line(
    kind: str,
    provider_id: str,
    reference: str,
    amount: int,
    currency: str,
    at: datetime,
) -> tuple[str, ...]:
    settled = at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return (kind, provider_id, reference, str(amount), currency, SETTLED, settled)
