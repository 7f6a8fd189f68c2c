"""Stripe's statement for a day: its balance transactions (payments/providers/stripe.py).

Stripe lists balance transactions newest first and has no "day" filter the
emulator honours, so the list is read from the top and stops at the first line
of the day before.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import stripe

from payments.providers.base import ProviderOutcomeUnknown, StatementEntry, StatementKind
from payments.providers.stripe_calls import plain
from payments.providers.stripe_parsing import from_stripe_amount


def balance_statement(client: stripe.StripeClient, *, day: date) -> Iterator[StatementEntry]:
    """The day's balance transactions (UTC), read newest first until the day before.

    A charge's line names the PaymentIntent (our ``trade_no``) and its
    ``out_trade_no``; a refund's, the Refund and its ``out_refund_no``.
    """
    start = int(datetime.combine(day, time(), tzinfo=UTC).timestamp())
    end = start + int(timedelta(days=1).total_seconds())
    try:
        listed = client.v1.balance_transactions.list(
            params={"limit": 100, "expand": ["data.source"]}
        )
        line = 1
        for item in listed.auto_paging_iter():
            txn = plain(item)
            if txn["created"] >= end:
                continue
            if txn["created"] < start:
                return
            line += 1
            yield _statement_entry(client, txn, line=line)
    except stripe.StripeError as error:
        raise ProviderOutcomeUnknown(f"Stripe: {error}") from error


def _statement_entry(client: stripe.StripeClient, txn: Any, *, line: int) -> StatementEntry:
    source: Any = txn["source"]
    if txn["type"] == "refund":
        kind, provider_id = StatementKind.REFUND, str(source["id"])
        reference = (source.get("metadata") or {}).get("out_refund_no", "")
    else:
        # A charge's line is the PaymentIntent's (our trade_no), named by its metadata.
        kind, provider_id = StatementKind.CHARGE, str(source["payment_intent"])
        intent = plain(client.v1.payment_intents.retrieve(provider_id))
        reference = (intent.get("metadata") or {}).get("out_trade_no", "")
    return StatementEntry(
        line=line,
        kind=kind,
        provider_id=provider_id,
        reference=str(reference),
        amount=from_stripe_amount(abs(int(txn["amount"])), str(txn["currency"])),
        currency=str(txn["currency"]).upper(),
        status="SUCCESS",
        settled_at=datetime.fromtimestamp(txn["created"], tz=UTC),
    )
