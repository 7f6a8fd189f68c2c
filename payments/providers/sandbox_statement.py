"""The sandbox's daily statement (CSV), read strictly and streaming into ``StatementEntry``.

Every line is checked before it is handed on: the exact header, seven fields,
a known type, the provider's ids and our references as text a column can hold,
an amount in minor units, an ISO 4217 currency, SUCCESS (a statement lists
money that moved), and a settlement time inside the day asked for. Anything
else is ``StatementMalformed`` naming the line, and the importer keeps none
of that statement.
"""

from __future__ import annotations

import codecs
import csv
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime, time, timedelta

from edge.bounds import BIGINT_MAX
from payments.providers.base import StatementEntry, StatementKind, StatementMalformed
from payments.providers.sandbox_parsing import _currency, _text, _timestamp

COLUMNS = (
    "type",
    "provider_id",
    "merchant_reference",
    "amount",
    "currency",
    "status",
    "settled_at",
)
# A statement lists settled money only; a declined charge or refund moved none.
SETTLED = "SUCCESS"
_DIGITS = re.compile(r"[0-9]{1,19}")


def text_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Bytes as they arrive -> lines of UTF-8 text, each with its own line ending.

    Incremental: a character or a line split across two chunks is joined, and
    nothing but the current line is held. Raises UnicodeDecodeError.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    rest = ""
    for chunk in chunks:
        *lines, rest = (rest + decoder.decode(chunk)).split("\n")
        for line in lines:
            yield line + "\n"
    rest += decoder.decode(b"", final=True)
    if rest:
        yield rest


def parse_statement(text: Iterable[str], *, day: date) -> Iterator[StatementEntry]:
    """Lines of CSV text (newlines kept) -> entries, one by one. Raises StatementMalformed."""
    rows = csv.reader(text, strict=True)
    try:
        header = next(rows, None)
        if header is None or tuple(header) != COLUMNS:
            raise StatementMalformed(f"line 1: the header is not {','.join(COLUMNS)}")
        for row in rows:
            yield _entry(row, line=rows.line_num, day=day)
    except csv.Error as error:
        raise StatementMalformed(f"line {rows.line_num}: not CSV ({error})") from error


def _entry(row: list[str], *, line: int, day: date) -> StatementEntry:
    if len(row) != len(COLUMNS):
        raise StatementMalformed(f"line {line}: {len(row)} fields, expected {len(COLUMNS)}")
    data = dict(zip(COLUMNS, row, strict=True))
    try:
        kind = StatementKind(data["type"])
    except ValueError:
        raise StatementMalformed(f"line {line}: unknown type {data['type'][:20]!r}") from None
    try:
        entry = StatementEntry(
            line=line,
            kind=kind,
            provider_id=_text(data, "provider_id"),
            reference=_text(data, "merchant_reference"),
            amount=_amount(data["amount"]),
            currency=_currency(data, "currency"),
            status=data["status"],
            settled_at=_timestamp(data, "settled_at"),
        )
    except ValueError as error:
        raise StatementMalformed(f"line {line}: {error}") from error
    if entry.status != SETTLED:
        raise StatementMalformed(f"line {line}: status {entry.status[:20]!r} is not {SETTLED}")
    start = datetime.combine(day, time.min, tzinfo=UTC)
    if not start <= entry.settled_at < start + timedelta(days=1):
        raise StatementMalformed(f"line {line}: settled_at {entry.settled_at} is not on {day}")
    return entry


def _amount(raw: str) -> int:
    if not _DIGITS.fullmatch(raw) or not 0 < int(raw) <= BIGINT_MAX:
        raise ValueError(f"amount must be a positive integer in minor units, not {raw[:20]!r}")
    return int(raw)
