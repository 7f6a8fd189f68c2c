"""Stripe's statement for a day: its balance transactions (payments/providers/stripe.py).

Stripe lists balance transactions newest first, and the emulator the tests use
(localstripe) honours no ``created`` filter, so the list is read from the top,
a page at a time, and stops at the first line of the day before. Each page
names the last transaction of the one before (``starting_after``), so a page
that fails is asked again, never the day from the start; a 429 (Stripe's "too
many requests") is waited out, with a backoff, and so is a page that got no
answer, up to ``PAGE_TRIES`` times; then the download fails as a whole
(``ProviderOutcomeUnknown``) and a later pass downloads the day again.

Every balance transaction becomes a line, whatever its type (Stripe adds types
over time): by its reporting category (the type where there is none) and the
object it comes from,

- a charge or payment: ``charge``, named by its PaymentIntent (our ``trade_no``)
  and that PaymentIntent's ``metadata.out_trade_no``;
- a refund or payment_refund: ``refund``, named by the Refund and its
  ``metadata.out_refund_no``;
- a refund_failure (also an adjustment of that category): ``refund_failure``,
  named by the Refund that failed;
- a dispute's adjustment (category ``dispute``, ``dispute_reversal``):
  ``dispute_withdrawal`` or ``dispute_reinstatement``, named by the dispute and
  its charge's ``out_trade_no``;
- anything else (payouts, fees, top-ups, transfers, and a line of a known kind
  that names no object we can read): ``other``, not ours to match, named by
  its own id and its type.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock
from typing import Any

import stripe

from payments.providers.base import ProviderOutcomeUnknown, StatementEntry, StatementKind
from payments.providers.stripe_calls import plain
from payments.providers.stripe_parsing import from_stripe_amount

PAGE_SIZE = 100  # Stripe's largest page
# A page asked this many times without an answer fails the download: with the
# backoff below that is half a minute, longer than Stripe's rate window (a second).
PAGE_TRIES = 5
BACKOFF_BASE_S = 1.0  # then 2, 4, 8 s between the tries of one page

# Reporting category (or type) -> the line it is. Cards and other methods have
# their own types (charge / payment, refund / payment_refund); the category is one.
_KINDS = {
    "charge": StatementKind.CHARGE,
    "payment": StatementKind.CHARGE,
    "refund": StatementKind.REFUND,
    "payment_refund": StatementKind.REFUND,
    "refund_failure": StatementKind.REFUND_FAILURE,
    "payment_failure_refund": StatementKind.REFUND_FAILURE,
    "dispute": StatementKind.DISPUTE_WITHDRAWAL,
    "dispute_reversal": StatementKind.DISPUTE_REINSTATEMENT,
}


def balance_statement(client: stripe.StripeClient, *, day: date) -> Iterator[StatementEntry]:
    """The day's balance transactions (UTC), read newest first until the day before."""
    start = int(datetime.combine(day, clock(), tzinfo=UTC).timestamp())
    end = start + int(timedelta(days=1).total_seconds())
    line = 1
    for txn in _transactions(client):
        if txn["created"] >= end:
            continue
        if txn["created"] < start:
            return
        line += 1
        yield statement_entry(txn, line=line)


def _transactions(client: stripe.StripeClient) -> Iterator[Any]:
    """Every balance transaction, newest first, page after page from where the last ended."""
    after: str | None = None
    while True:
        params: dict[str, Any] = {
            "limit": PAGE_SIZE,
            # The object each comes from, and a charge's or refund's PaymentIntent with
            # it: its metadata names our reference (three levels; Stripe allows four).
            "expand": ["data.source", "data.source.payment_intent"],
        }
        if after is not None:
            params["starting_after"] = after
        page = _page(client, params)
        data = page.get("data") or []
        yield from data
        if not page.get("has_more") or not data:
            return
        after = str(data[-1]["id"])


def _page(client: stripe.StripeClient, params: dict[str, Any]) -> Any:
    """One page, asked again after a 429 or a lost answer (see the module docstring)."""
    for attempt in range(PAGE_TRIES):
        try:
            return plain(client.v1.balance_transactions.list(params=params))  # type: ignore[arg-type]
        except (stripe.RateLimitError, stripe.APIConnectionError) as error:
            if attempt + 1 == PAGE_TRIES:
                raise ProviderOutcomeUnknown(f"Stripe: {type(error).__name__}: {error}") from error
            time.sleep(BACKOFF_BASE_S * 2**attempt)
        except stripe.StripeError as error:
            raise ProviderOutcomeUnknown(f"Stripe: {type(error).__name__}: {error}") from error
    raise AssertionError("unreachable")  # pragma: no cover


def statement_entry(txn: Any, *, line: int) -> StatementEntry:
    """One balance transaction as a statement line (never an exception for its type)."""
    category = str(txn.get("reporting_category") or txn.get("type") or "")
    known = _KINDS.get(category) or _KINDS.get(str(txn.get("type") or ""))
    source = txn.get("source")
    named = _named(known, source) if known is not None and isinstance(source, dict) else None
    if known is None or named is None:
        kind, named = StatementKind.OTHER, (str(txn["id"]), str(txn.get("type") or category))
    else:
        kind = known
    provider_id, reference = named
    currency = str(txn["currency"]).upper()
    return StatementEntry(
        line=line,
        kind=kind,
        provider_id=provider_id,
        reference=reference,
        amount=from_stripe_amount(abs(int(txn["amount"])), currency),
        currency=currency,
        status="SUCCESS",
        settled_at=datetime.fromtimestamp(txn["created"], tz=UTC),
    )


def _named(kind: StatementKind, source: dict[str, Any]) -> tuple[str, str] | None:
    """(the provider's id, our reference) of the line's object; None if it names none."""
    match kind:
        case StatementKind.CHARGE:
            # A charge's line is its PaymentIntent's (our trade_no), named by its metadata;
            # a charge made without one (an old integration) by the charge itself.
            intent = source.get("payment_intent")
            if isinstance(intent, dict):
                return str(intent["id"]), _metadata(intent, "out_trade_no")
            return str(intent or source["id"]), _metadata(source, "out_trade_no")
        case StatementKind.REFUND | StatementKind.REFUND_FAILURE:
            if source.get("object") != "refund":
                return None
            return str(source["id"]), _metadata(source, "out_refund_no")
        case StatementKind.DISPUTE_WITHDRAWAL | StatementKind.DISPUTE_REINSTATEMENT:
            if source.get("object") != "dispute":
                return None
            intent = source.get("payment_intent")
            reference = _metadata(intent, "out_trade_no") if isinstance(intent, dict) else ""
            return str(source["id"]), reference
    return None


def _metadata(obj: Any, name: str) -> str:
    value = (obj.get("metadata") or {}).get(name)
    return value if isinstance(value, str) else ""
