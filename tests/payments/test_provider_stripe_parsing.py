"""Reading Stripe's objects (payments/providers/stripe_parsing.py) on the shapes Stripe
documents, for the states localstripe cannot produce: it answers every refund
``succeeded`` at once (never ``pending``, ``requires_action``, ``failed`` or
``canceled``) and never leaves a PaymentIntent ``processing`` after a card confirm.
The states it can produce are shown over HTTP in test_provider_stripe.py.
"""

from typing import Any

import pytest

from payments.providers import (
    ChargeStatus,
    NotificationNotApplied,
    ProviderAnswerConflict,
    ProviderOutcomeUnknown,
    ProviderRejected,
    RefundStatus,
)
from payments.providers.stripe_parsing import (
    from_stripe_amount,
    parse_event,
    parse_intent,
    parse_refund,
    to_stripe_amount,
)

REFERENCE = "P2026120200000000000000001"
REFUND_NO = "R2026120200000000000000001"


def _intent(status: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": "pi_1",
        "object": "payment_intent",
        "amount": 1999,
        "currency": "cny",
        "status": status,
        "created": 1_764_633_600,
        "metadata": {"out_trade_no": REFERENCE},
        **extra,
    }


def _refund(status: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": "re_1",
        "object": "refund",
        "amount": 500,
        "currency": "cny",
        "status": status,
        "created": 1_764_633_600,
        "metadata": {"out_refund_no": REFUND_NO, "out_trade_no": REFERENCE},
        **extra,
    }


@pytest.mark.parametrize("state", ["processing", "requires_action", "requires_capture"])
def test_a_payment_intent_not_settled_yet_is_an_unknown_outcome(state):
    # processing: a bank debit on its way; requires_action: 3-D Secure awaited (the
    # emulator shows this one too); requires_capture: authorised, not captured.
    with pytest.raises(ProviderOutcomeUnknown, match=state):
        parse_intent(_intent(state), out_trade_no=REFERENCE)


def test_a_payment_intent_in_a_state_stripe_may_add_later_is_unknown():
    with pytest.raises(ProviderOutcomeUnknown, match="unknown state"):
        parse_intent(_intent("requires_magic"), out_trade_no=REFERENCE)


def test_the_final_payment_intent_states_are_the_protocols():
    succeeded = parse_intent(
        _intent("succeeded", latest_charge={"id": "ch_1", "created": 1_764_633_601}),
        out_trade_no=REFERENCE,
    )
    assert succeeded is not None
    assert (succeeded.status, succeeded.amount, succeeded.currency) == (
        ChargeStatus.SUCCESS,
        1999,
        "CNY",
    )
    assert succeeded.paid_at is not None
    assert succeeded.paid_at.timestamp() == 1_764_633_601
    canceled = parse_intent(_intent("canceled"), out_trade_no=REFERENCE)
    assert canceled is not None
    assert canceled.status is ChargeStatus.CLOSED
    declined = parse_intent(
        _intent(
            "requires_payment_method",
            last_payment_error={"code": "card_declined", "decline_code": "insufficient_funds"},
        ),
        out_trade_no=REFERENCE,
    )
    assert declined is not None
    assert (declined.status, declined.decline_reason) == (
        ChargeStatus.DECLINED,
        "insufficient_funds",
    )
    # Never confirmed (or confirmed and refused with nothing kept): holds no money
    assert parse_intent(_intent("requires_confirmation"), out_trade_no=REFERENCE) is None
    assert parse_intent(_intent("requires_payment_method"), out_trade_no=REFERENCE) is None


def test_a_payment_intent_of_another_attempt_is_a_conflict():
    with pytest.raises(ProviderAnswerConflict):
        parse_intent(_intent("succeeded"), out_trade_no="P-someone-else")


@pytest.mark.parametrize("state", ["pending", "requires_action"])
def test_a_refund_not_settled_yet_is_an_unknown_outcome(state):
    # The reconciler asks again later (query_refund) until Stripe says succeeded or failed.
    with pytest.raises(ProviderOutcomeUnknown, match=state):
        parse_refund(_refund(state), out_refund_no=REFUND_NO)


def test_a_failed_or_canceled_refund_is_declined_with_stripes_reason():
    failed = parse_refund(
        _refund("failed", failure_reason="expired_or_canceled_card"), out_refund_no=REFUND_NO
    )
    assert (failed.status, failed.decline_reason) == (
        RefundStatus.DECLINED,
        "expired_or_canceled_card",
    )
    canceled = parse_refund(_refund("canceled"), out_refund_no=REFUND_NO)
    assert (canceled.status, canceled.decline_reason) == (RefundStatus.DECLINED, "canceled")
    succeeded = parse_refund(_refund("succeeded"), out_refund_no=REFUND_NO)
    assert (succeeded.status, succeeded.amount, succeeded.out_trade_no) == (
        RefundStatus.SUCCESS,
        500,
        REFERENCE,
    )


@pytest.mark.parametrize("state", ["pending", "requires_action"])
def test_a_refund_event_not_settled_yet_is_stored_not_applied(state):
    event = {"id": "evt_1", "type": "refund.updated", "data": {"object": _refund(state)}}

    with pytest.raises(NotificationNotApplied):
        parse_event(event)


@pytest.mark.parametrize(
    ("ours", "currency", "stripes"),
    [
        (1999, "CNY", 1999),  # two-decimal at both: fen
        (500, "JPY", 500),  # zero-decimal at both: yen
        (5, "ISK", 500),  # no minor unit in ISO 4217, two-decimal at Stripe
        (100, "MGA", 1),  # two-decimal in ISO 4217, zero-decimal at Stripe
        (1990, "KWD", 1990),  # three-decimal at both, last digit 0
        (1999, "HUF", 1999),  # two-decimal for charges (zero-decimal only for payouts)
    ],
)
def test_amounts_follow_stripes_currency_rules_both_ways(ours, currency, stripes):
    assert to_stripe_amount(ours, currency) == stripes
    assert from_stripe_amount(stripes, currency.lower()) == ours


@pytest.mark.parametrize(("ours", "currency"), [(1995, "KWD"), (150, "MGA")])
def test_an_amount_stripe_cannot_take_is_refused_before_sending(ours, currency):
    with pytest.raises(ProviderRejected):
        to_stripe_amount(ours, currency)


def test_an_amount_of_stripes_we_cannot_read_is_no_answer():
    with pytest.raises(ProviderOutcomeUnknown):
        from_stripe_amount(4050, "isk")  # a fraction of a króna: not in our units


def test_an_isk_payment_intent_is_read_in_our_units():
    intent = _intent("succeeded", amount=500, currency="isk")

    read = parse_intent(intent, out_trade_no=REFERENCE)

    assert read is not None
    assert (read.amount, read.currency) == (5, "ISK")
