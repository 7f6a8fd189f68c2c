"""Reading Stripe's objects as the protocol's values, and Stripe's amounts as ours.

A PaymentIntent is found by its own id, which the shop records
(``Payment.trade_no``) before it confirms it, or which a statement line or an
event names. Our reference travels in ``metadata.out_trade_no`` /
``metadata.out_refund_no``, and every answer is checked against it (an answer
about another attempt is a conflict, never applied).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from payments.providers.base import (
    ChargeResult,
    ChargeStatus,
    CustomerActionRequired,
    DisputeNotification,
    DisputeResult,
    DisputeStatus,
    Notification,
    NotificationMalformed,
    NotificationNotApplied,
    ProviderAnswerConflict,
    ProviderOutcomeUnknown,
    ProviderRejected,
    RefundNotification,
    RefundResult,
    RefundStatus,
)

# Stripe's currency rules (its "Supported currencies" page). The shop's amounts are
# ISO 4217 minor units, which is what Stripe takes for almost every currency: 1999
# CNY is 19.99 yuan, and 500 JPY is 500 yen (JPY has no minor unit; Stripe calls
# such currencies "zero-decimal" and takes them as they are). Where the two differ:
# - ISK has no minor unit in ISO 4217, but Stripe kept it two-decimal for older
#   integrations (and takes only whole krónur): 5 ISK is sent as 500;
# - MGA has two in ISO 4217, but is zero-decimal at Stripe: 100 (one ariary) is
#   sent as 1, and a fraction of an ariary cannot be sent at all;
# - the three-decimal currencies are thousandths at both, but Stripe requires the
#   last digit to be 0.
# (HUF and TWD are two-decimal for charges and refunds, as in ISO 4217; Stripe's
# zero-decimal rule for them is about payouts, which the shop does not make.)
STRIPE_PER_ISO_UNIT = {"ISK": 100}  # Stripe's amount = ours * this
ISO_PER_STRIPE_UNIT = {"MGA": 100}  # ours = Stripe's amount * this
THREE_DECIMAL = frozenset(["BHD", "JOD", "KWD", "OMR", "TND"])


def to_stripe_amount(amount: int, currency: str) -> int:
    """Our minor units as Stripe's; an amount Stripe cannot take is refused here,
    before anything is sent (nothing moved: ProviderRejected)."""
    code = currency.upper()
    if code in THREE_DECIMAL and amount % 10:
        raise ProviderRejected(400, "amount_not_representable")
    if divisor := ISO_PER_STRIPE_UNIT.get(code):
        if amount % divisor:
            raise ProviderRejected(400, "amount_not_representable")
        return amount // divisor
    return amount * STRIPE_PER_ISO_UNIT.get(code, 1)


def from_stripe_amount(amount: Any, currency: str) -> int:
    """Stripe's amount of ``currency`` in our minor units (an answer we cannot read in
    them, such as ISK 4050, is no answer: outcome unknown)."""
    if not isinstance(amount, int):
        raise ProviderOutcomeUnknown(f"Stripe's amount {amount!r} is not an integer")
    code = currency.upper()
    if divisor := STRIPE_PER_ISO_UNIT.get(code):
        if amount % divisor:
            raise ProviderOutcomeUnknown(f"Stripe's {code} amount {amount} is not whole units")
        return amount // divisor
    return amount * ISO_PER_STRIPE_UNIT.get(code, 1)


def _field(obj: Any, name: str) -> Any:
    try:
        return obj[name]
    except (KeyError, TypeError) as error:
        raise ProviderOutcomeUnknown(f"Stripe's answer has no {name!r}") from error


def _metadata(obj: Any, name: str) -> str | None:
    metadata = obj.get("metadata") or {}
    value = metadata.get(name)
    return value if isinstance(value, str) else None


def _when(seconds: Any) -> datetime | None:
    return datetime.fromtimestamp(seconds, tz=UTC) if isinstance(seconds, int) else None


def intent_reference(intent: Any) -> str | None:
    return _metadata(intent, "out_trade_no")


def check_intent(intent: Any, *, out_trade_no: str) -> None:
    """``out_trade_no`` "" asks about a PaymentIntent that names no reference of ours."""
    named = intent_reference(intent)
    if (named or "") != out_trade_no:
        raise ProviderAnswerConflict(
            f"PaymentIntent {intent.get('id')} names {named!r}, not {out_trade_no!r}"
        )


# A PaymentIntent between "confirmed" and "settled" (3-D Secure, a bank debit still
# processing, an authorisation awaiting capture): money may yet move. (3-D Secure,
# requires_action, waits for the customer: CustomerActionRequired, an unknown too.)
PENDING_STATES = frozenset({"processing", "requires_action", "requires_capture"})
# Created, never confirmed (or confirmed and refused, with no error kept): it holds
# no money and moves none until someone confirms it.
UNCHARGED_STATES = frozenset({"requires_confirmation", "requires_payment_method"})


def parse_intent(intent: Any, *, out_trade_no: str) -> ChargeResult | None:
    """The attempt as the PaymentIntent tells it; None while it has charged nothing.

    Raises ProviderOutcomeUnknown while it is pending, ProviderAnswerConflict for
    another attempt's PaymentIntent.
    """
    check_intent(intent, out_trade_no=out_trade_no)
    state = _field(intent, "status")
    currency = str(_field(intent, "currency")).upper()
    terms = {
        "out_trade_no": out_trade_no,
        "trade_no": _field(intent, "id"),
        "amount": from_stripe_amount(_field(intent, "amount"), currency),
        "currency": currency,
    }
    error = intent.get("last_payment_error")
    if state == "succeeded":
        charge = intent.get("latest_charge")
        created = charge.get("created") if hasattr(charge, "get") else None
        return ChargeResult(
            status=ChargeStatus.SUCCESS,
            paid_at=_when(created) or _when(intent.get("created")),
            **terms,
        )
    if state == "canceled":
        return ChargeResult(status=ChargeStatus.CLOSED, **terms)
    if state == "requires_payment_method" and error:
        code = error.get("decline_code") or error.get("code") or "card_declined"
        return ChargeResult(status=ChargeStatus.DECLINED, decline_reason=str(code), **terms)
    if state in UNCHARGED_STATES:
        return None
    if state == "requires_action":
        # 3-D Secure and the like: the customer's client finishes it with these two.
        raise CustomerActionRequired(
            out_trade_no=out_trade_no,
            action={
                "client_secret": intent.get("client_secret"),
                "next_action": intent.get("next_action"),
            },
        )
    if state in PENDING_STATES:
        raise ProviderOutcomeUnknown(f"PaymentIntent {terms['trade_no']} is {state}")
    raise ProviderOutcomeUnknown(f"PaymentIntent {terms['trade_no']} in an unknown state {state!r}")


def parse_refund(refund: Any, *, out_refund_no: str) -> RefundResult:
    named = _metadata(refund, "out_refund_no")
    if named != out_refund_no:
        raise ProviderAnswerConflict(
            f"Refund {refund.get('id')} names {named!r}, not {out_refund_no!r}"
        )
    state = _field(refund, "status")
    currency = str(_field(refund, "currency")).upper()
    terms = {
        "out_refund_no": out_refund_no,
        "out_trade_no": _metadata(refund, "out_trade_no") or "",
        "refund_id": _field(refund, "id"),
        "amount": from_stripe_amount(_field(refund, "amount"), currency),
        "currency": currency,
    }
    if state == "succeeded":
        return RefundResult(
            status=RefundStatus.SUCCESS, refunded_at=_when(refund.get("created")), **terms
        )
    if state in ("failed", "canceled"):
        reason = str(refund.get("failure_reason") or state)
        # Failed after its money left our balance: Stripe put it back with a balance
        # transaction of its own (a refund_failure on the statement). The refund went
        # through, then was reversed; without one, it never moved anything.
        if refund.get("failure_balance_transaction"):
            return RefundResult(
                status=RefundStatus.REVERSED,
                refunded_at=_when(refund.get("created")),
                decline_reason=reason,
                **terms,
            )
        return RefundResult(status=RefundStatus.DECLINED, decline_reason=reason, **terms)
    # pending, requires_action: not settled yet; the reconciler asks again (query_refund).
    # The emulator answers every refund succeeded at once: these are tested on the
    # shapes Stripe documents (tests/payments/test_provider_stripe_parsing.py).
    raise ProviderOutcomeUnknown(f"Refund {terms['refund_id']} is {state}")


# Stripe's dispute states: an inquiry (warning_*) withdraws nothing; a closed one
# that was not lost is the merchant's (won; an inquiry closed; one prevented).
DISPUTE_STATES = {
    "won": DisputeStatus.WON,
    "warning_closed": DisputeStatus.WON,
    "prevented": DisputeStatus.WON,
    "lost": DisputeStatus.LOST,
}


def parse_dispute(dispute: Any) -> DisputeResult:
    """A Stripe Dispute as the protocol's account of it.

    Its money is counted in the charge's currency: withdrawn is the disputed
    amount once a balance transaction took it (a negative one), reinstated the
    same once one gave it back (a positive one). Stripe moves the whole disputed
    amount each way (its fee is a balance transaction's ``fee``, not ours). The
    trade is the PaymentIntent (our ``trade_no``), or the charge for a charge
    made without one; its reference, when the PaymentIntent is expanded.
    """
    currency = str(_field(dispute, "currency")).upper()
    amount = from_stripe_amount(_field(dispute, "amount"), currency)
    movements: list[int] = [
        txn["amount"]
        for txn in dispute.get("balance_transactions") or []
        if isinstance(txn, dict) and isinstance(txn.get("amount"), int)
    ]
    intent = dispute.get("payment_intent")
    charge = dispute.get("charge")
    trade = intent.get("id") if isinstance(intent, dict) else intent
    trade = trade or (charge.get("id") if isinstance(charge, dict) else charge)
    if not isinstance(trade, str) or not trade:
        raise ProviderOutcomeUnknown(f"Dispute {dispute.get('id')} names no charge")
    return DisputeResult(
        dispute_id=str(_field(dispute, "id")),
        trade_no=trade,
        out_trade_no=(intent_reference(intent) or "") if isinstance(intent, dict) else "",
        status=DISPUTE_STATES.get(str(_field(dispute, "status")), DisputeStatus.OPEN),
        amount=amount,
        currency=currency,
        withdrawn=amount if any(m < 0 for m in movements) else 0,
        reinstated=amount if any(m > 0 for m in movements) else 0,
        opened_at=_when(dispute.get("created")),
        reason=str(dispute.get("reason") or ""),
    )


INTENT_EVENTS = {
    "payment_intent.succeeded": ChargeStatus.SUCCESS,
    "payment_intent.payment_failed": ChargeStatus.DECLINED,
    "payment_intent.canceled": ChargeStatus.CLOSED,
}
REFUND_EVENTS = ("refund.updated", "refund.created")
CHARGE_REFUNDED = "charge.refunded"
# Every change of a dispute: each carries the whole Dispute, which is what is booked.
DISPUTE_EVENTS = (
    "charge.dispute.created",
    "charge.dispute.updated",
    "charge.dispute.closed",
    "charge.dispute.funds_withdrawn",
    "charge.dispute.funds_reinstated",
)


def parse_event(event: Any) -> Notification | RefundNotification | DisputeNotification:
    """A verified event as the protocol's notification.

    NotificationNotApplied for another type, or an object that carries none of
    our references and moved no money (a failed or cancelled payment made
    elsewhere on the same account); the endpoint stores and acknowledges those.
    A succeeded PaymentIntent naming none of ours is a capture the shop did not
    make: notified with the reference "" (the account is the shop's alone, and
    such money goes back: a stray capture). NotificationMalformed for what is no
    event.
    """
    try:
        kind, event_id, created = str(event["type"]), str(event["id"]), event.get("created")
        obj = event["data"]["object"]
        obj.get("id")
    except (KeyError, TypeError, AttributeError) as error:
        raise NotificationMalformed("not a Stripe event") from error
    if kind == CHARGE_REFUNDED:
        # The charge with its refunds (when the API version lists them): the newest of ours.
        listed = (obj.get("refunds") or {}).get("data") or []
        ours = [r for r in listed if isinstance(r, dict) and _metadata(r, "out_refund_no")]
        if not ours:
            raise NotificationNotApplied(event_id, kind)
        kind, obj = REFUND_EVENTS[0], max(ours, key=lambda r: r.get("created") or 0)
    if kind in INTENT_EVENTS:
        out_trade_no = intent_reference(obj)
        if out_trade_no is None and kind != "payment_intent.succeeded":
            raise NotificationNotApplied(event_id, kind)
        # A capture naming no reference of ours (made in the dashboard) is one too:
        # notified with "" as its reference, it is found and refunded as a stray.
        return Notification(
            notify_id=str(event_id),
            trade_no=str(_malformed_unless(obj, "id")),
            out_trade_no=out_trade_no or "",
            trade_status=INTENT_EVENTS[kind],
            amount=_event_amount(obj),
            currency=str(_malformed_unless(obj, "currency")).upper(),
            paid_at=_when(created) if kind == "payment_intent.succeeded" else None,
        )
    if kind in DISPUTE_EVENTS:
        try:
            return DisputeNotification(notify_id=event_id, dispute=parse_dispute(obj))
        except ProviderOutcomeUnknown as error:  # signed, but not a dispute we can read
            raise NotificationMalformed(str(error)) from error
    if kind in REFUND_EVENTS:
        out_refund_no = _metadata(obj, "out_refund_no")
        if out_refund_no is None or obj.get("status") not in ("succeeded", "failed"):
            raise NotificationNotApplied(event_id, kind)  # not ours, or not settled yet
        try:
            status = parse_refund(obj, out_refund_no=out_refund_no).status
        except ProviderOutcomeUnknown as error:
            raise NotificationMalformed(str(error)) from error
        return RefundNotification(
            notify_id=str(event_id),
            refund_id=str(_malformed_unless(obj, "id")),
            out_refund_no=out_refund_no,
            out_trade_no=_metadata(obj, "out_trade_no") or "",
            status=status,
            amount=_event_amount(obj),
            currency=str(_malformed_unless(obj, "currency")).upper(),
            refunded_at=_when(obj.get("created")),
        )
    raise NotificationNotApplied(event_id, kind)


def _malformed_unless(obj: Any, name: str) -> Any:
    try:
        return obj[name]
    except (KeyError, TypeError) as error:
        raise NotificationMalformed(f"the event's object has no {name!r}") from error


def _event_amount(obj: Any) -> int:
    currency = str(_malformed_unless(obj, "currency"))
    try:
        return from_stripe_amount(_malformed_unless(obj, "amount"), currency)
    except ProviderOutcomeUnknown as error:  # signed, but not an amount we can read
        raise NotificationMalformed(str(error)) from error
