"""Stripe, through its official SDK (docs/design.md, "Provider adapters").

How the protocol maps onto Stripe (CONTRACT.md has the whole table):

- ``prepare_charge``: a PaymentIntent is created with an idempotency key derived
  from the attempt and ``metadata.out_trade_no``; the flow commits its id (as
  the attempt's ``trade_no``) in a recovery point of its own, then ``charge``
  confirms that very PaymentIntent. A crash or a lost answer between the two
  resumes with the same PaymentIntent: Stripe cannot be asked "which
  PaymentIntent is out_trade_no?" (its search is eventually consistent, and the
  emulator the tests use has none), so the record is what finds it again.
- ``query``: retrieve by the recorded id (the truth). No id recorded: Stripe
  holds nothing we could ever confirm, and the answer is None.
- ``close`` (the fence): cancel. Nothing recorded (the create's answer was lost):
  the create is sent again with its derived key, which Stripe answers with the
  PaymentIntent it made the first time, and that one is cancelled; so is every
  PaymentIntent naming the attempt that Stripe lists since the attempt began (a
  key Stripe no longer keeps, an emulator that does not replay). CLOSED is
  answered only from Stripe's own cancel. Already succeeded: Stripe refuses the
  cancel, and the PaymentIntent as retrieved (SUCCESS) is the answer: the
  capture is the truth.
- ``refund`` / ``query_refund``: a Refund of the PaymentIntent with a derived
  key and ``metadata.out_refund_no``; found again in the PaymentIntent's refunds.
- ``statement``: the day's balance transactions, newest first, as Stripe lists them.
- Notifications: ``Stripe-Signature`` verified by the SDK (``stripe.Webhook``,
  in ``stripe_webhooks``).

Errors are mapped in ``stripe_calls`` (a card decline is not a refusal: it is
the attempt's DECLINED answer); the statement is read in ``stripe_statement``;
amounts are converted to Stripe's units both ways in ``stripe_parsing``.

The payment method: a real integration collects it in the browser (Stripe.js)
and confirms with it; this adapter confirms server-side with one configured
PaymentMethod (``pm_card_visa``, Stripe's test card, by default), which is
enough for test mode and the emulator, and is the one line a real shop changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Protocol

import stripe
from django.conf import settings

from payments.providers.base import (
    ChargeResult,
    ChargeStatus,
    Notification,
    ProviderOutcomeUnknown,
    ProviderRejected,
    RefundNotification,
    RefundResult,
    StatementEntry,
)
from payments.providers.observed import provider_call
from payments.providers.stripe_calls import Refused, call, plain
from payments.providers.stripe_parsing import (
    check_intent,
    intent_reference,
    parse_event,
    parse_intent,
    parse_refund,
    to_stripe_amount,
)
from payments.providers.stripe_statement import balance_statement
from payments.providers.stripe_webhooks import verified_event

TEST_PAYMENT_METHOD = "pm_card_visa"
# How far before the attempt's own clock the fence still looks for its PaymentIntents:
# Stripe stamps ``created`` with its clock, the shop its attempt with ours.
CLOCK_SKEW = timedelta(minutes=5)
# PaymentIntents per page when the fence lists them (Stripe's largest page).
LIST_PAGE = 100


@dataclass(frozen=True)
class AttemptTerms:
    """What the shop sent when it created an attempt's PaymentIntent: enough to send
    the same create again (Stripe replays a create only for the same key and terms)."""

    amount: int
    currency: str
    idempotency_key: str
    created_at: datetime


class StripeReferences(Protocol):
    """What the shop recorded of its Stripe objects (Stripe has no lookup by our reference)."""

    def payment_intent(self, out_trade_no: str) -> str | None:
        """The PaymentIntent id recorded for the attempt, or None."""
        ...

    def refund_charge(self, out_refund_no: str) -> str | None:
        """The ``out_trade_no`` of the attempt a refund is of, or None."""
        ...

    def currency(self, out_trade_no: str) -> str | None:
        """The attempt's currency (a refund's amount is in the charge's), or None."""
        ...

    def attempt(self, out_trade_no: str) -> AttemptTerms | None:
        """The terms the attempt's PaymentIntent was created with, or None."""
        ...


class StripeProvider:
    """The PaymentProvider protocol on Stripe; with PreparesCharges (the extra phase)."""

    name = "stripe"
    callback_route = "callback-stripe"

    def __init__(
        self,
        *,
        api_key: str,
        webhook_secret: str,
        api_base: str,
        timeout_s: float,
        references: StripeReferences,
        payment_method: str = TEST_PAYMENT_METHOD,
    ) -> None:
        self.webhook_secret = webhook_secret
        self.references = references
        self.payment_method = payment_method
        self.client = stripe.StripeClient(
            api_key,
            base_addresses={"api": api_base},
            # Retries are the flow's (same derived key), never a hidden second request.
            max_network_retries=0,
            http_client=stripe.RequestsClient(timeout=timeout_s),
        )

    @classmethod
    def from_settings(cls, references: StripeReferences) -> StripeProvider:
        return cls(
            api_key=settings.STRIPE_API_KEY,
            webhook_secret=settings.STRIPE_WEBHOOK_SECRET,
            api_base=settings.STRIPE_API_BASE,
            timeout_s=settings.PROVIDER_TIMEOUT_S,
            references=references,
        )

    # --- charges -------------------------------------------------------------------

    @provider_call("prepare_charge")
    def prepare_charge(
        self, *, out_trade_no: str, amount: int, currency: str, idempotency_key: str
    ) -> str:
        """Create the attempt's PaymentIntent (unconfirmed: nothing moves) and return its id."""
        return self._create(
            out_trade_no=out_trade_no,
            amount=amount,
            currency=currency,
            idempotency_key=idempotency_key,
        )

    def _create(
        self, *, out_trade_no: str, amount: int, currency: str, idempotency_key: str
    ) -> str:
        # The same terms and key every time for one attempt: Stripe then answers a
        # repeat with the PaymentIntent it made first (the fence relies on it too).
        intent = call(
            lambda: self.client.v1.payment_intents.create(
                params={
                    "amount": to_stripe_amount(amount, currency),
                    "currency": currency.lower(),
                    "payment_method": self.payment_method,
                    "metadata": {"out_trade_no": out_trade_no},
                },
                options={"idempotency_key": f"{idempotency_key}:create"},
            )
        )
        check_intent(intent, out_trade_no=out_trade_no)
        return str(intent["id"])

    @provider_call("charge")
    def charge(
        self,
        *,
        out_trade_no: str,
        amount: int,
        currency: str,
        payer: str,
        notify_url: str,
        idempotency_key: str,
    ) -> ChargeResult:
        """Confirm the attempt's recorded PaymentIntent (``prepare_charge`` made it).

        Never one that is not recorded: money moved through a PaymentIntent the
        shop cannot find again would be invisible to ``query`` and to the fence.
        Without a recorded id this refuses before sending anything. ``payer`` and
        ``notify_url`` are the sandbox's: Stripe knows the payer by the payment
        method, and sends webhooks to the endpoint configured in its dashboard.
        """
        intent_id = self.references.payment_intent(out_trade_no)
        if intent_id is None:
            raise ProviderRejected(409, "no_payment_intent_recorded")
        try:
            intent = call(
                lambda: self.client.v1.payment_intents.confirm(
                    intent_id,
                    params={"expand": ["latest_charge"]},
                    options={"idempotency_key": f"{idempotency_key}:confirm"},
                )
            )
        except Refused:
            # A decline (402), or a PaymentIntent that is no longer confirmable (it
            # succeeded or was cancelled already): its state says which.
            intent = self._retrieve(intent_id)
            if intent["status"] in ("requires_confirmation", "requires_payment_method") and not (
                intent.get("last_payment_error")
            ):
                raise ProviderRejected(400, "confirm_refused") from None
        result = parse_intent(intent, out_trade_no=out_trade_no)
        if result is None:
            raise ProviderOutcomeUnknown(f"PaymentIntent {intent_id} is still unconfirmed")
        return result

    @provider_call("query")
    def query(self, *, out_trade_no: str) -> ChargeResult | None:
        intent_id = self.references.payment_intent(out_trade_no)
        if intent_id is None:
            return None  # never created, or created and never recorded: never confirmed
        return parse_intent(self._retrieve(intent_id), out_trade_no=out_trade_no)

    @provider_call("close")
    def close(self, *, out_trade_no: str) -> ChargeResult:
        intent_id = self.references.payment_intent(out_trade_no)
        if intent_id is None:
            return self._close_unrecorded(out_trade_no)
        return self._cancel(intent_id, out_trade_no=out_trade_no)

    def _cancel(self, intent_id: str, *, out_trade_no: str) -> ChargeResult:
        """Cancel one PaymentIntent; what it became, as Stripe says."""
        try:
            intent = call(
                lambda: self.client.v1.payment_intents.cancel(
                    intent_id, params={"expand": ["latest_charge"]}
                )
            )
        except Refused:
            # Not cancellable: it succeeded (the capture is the truth) or is cancelled already.
            intent = self._retrieve(intent_id)
        result = parse_intent(intent, out_trade_no=out_trade_no)
        if result is None:
            raise ProviderOutcomeUnknown(f"PaymentIntent {intent_id} was not cancelled")
        return result

    def _close_unrecorded(self, out_trade_no: str) -> ChargeResult:
        """The fence of an attempt whose PaymentIntent id the shop never recorded.

        The create's answer was lost, or it never reached Stripe; either way a
        retry of the pay would create again with the same key and terms, get the
        same PaymentIntent back, and confirm it. So the fence does exactly that
        create (making it now, if it never reached Stripe) and cancels what comes
        back. A create whose key Stripe no longer keeps (it keeps them at least 24
        hours), or an emulator that makes a new object for a repeated key, would
        hide the first one from that: every PaymentIntent naming the attempt that
        Stripe lists since the attempt began is cancelled too, and so is an id a
        retry recorded meanwhile. The answer is Stripe's: a success if one got in
        first (the capture is the truth), otherwise the cancel of the create's.
        """
        terms = self.references.attempt(out_trade_no)
        if terms is None:
            # Not an attempt of ours: nothing we could create with its terms.
            raise ProviderOutcomeUnknown(f"no attempt {out_trade_no} recorded to fence")
        try:
            created = self._create(
                out_trade_no=out_trade_no,
                amount=terms.amount,
                currency=terms.currency,
                idempotency_key=terms.idempotency_key,
            )
        except ProviderRejected as refusal:
            # A refusal of the repeat proves nothing about the first create.
            raise ProviderOutcomeUnknown(f"the fence's create was refused: {refusal}") from refusal
        intent_ids = [created]
        for intent_id in self._intents_naming(out_trade_no, since=terms.created_at):
            if intent_id not in intent_ids:
                intent_ids.append(intent_id)
        recorded = self.references.payment_intent(out_trade_no)
        if recorded is not None and recorded not in intent_ids:
            intent_ids.append(recorded)
        answers = [self._cancel(intent_id, out_trade_no=out_trade_no) for intent_id in intent_ids]
        captured = [answer for answer in answers if answer.status is ChargeStatus.SUCCESS]
        return captured[0] if captured else answers[0]

    def _intents_naming(self, out_trade_no: str, *, since: datetime) -> list[str]:
        """The ids of the PaymentIntents naming ``out_trade_no`` created since ``since``.

        Stripe's list (not its search, which lags behind writes), newest first, read
        until a PaymentIntent older than the attempt (less the clocks' skew).
        """
        oldest = int((since - CLOCK_SKEW).timestamp())
        found: list[str] = []
        try:
            listed = self.client.v1.payment_intents.list(params={"limit": LIST_PAGE})
            for item in listed.auto_paging_iter():
                intent = plain(item)
                if not isinstance(intent.get("created"), int) or intent["created"] < oldest:
                    break
                if intent_reference(intent) == out_trade_no:
                    found.append(str(intent["id"]))
        except stripe.StripeError as error:
            raise ProviderOutcomeUnknown(f"Stripe: {error}") from error
        return found

    def _retrieve(self, intent_id: str) -> Any:
        try:
            return call(
                lambda: self.client.v1.payment_intents.retrieve(
                    intent_id, params={"expand": ["latest_charge"]}
                )
            )
        except Refused as refusal:
            # We recorded this id from Stripe's own answer: its absence is no proof.
            raise ProviderOutcomeUnknown(f"PaymentIntent {intent_id}: {refusal}") from refusal

    # --- refunds -------------------------------------------------------------------

    @provider_call("refund")
    def refund(
        self,
        *,
        out_refund_no: str,
        out_trade_no: str,
        amount: int,
        notify_url: str,
        idempotency_key: str,
    ) -> RefundResult:
        intent_id = self.references.payment_intent(out_trade_no)
        currency = self.references.currency(out_trade_no)
        if intent_id is None or currency is None:
            raise ProviderRejected(404, "no_payment_intent")  # nothing Stripe could refund
        try:
            refund = call(
                lambda: self.client.v1.refunds.create(
                    params={
                        "payment_intent": intent_id,
                        "amount": to_stripe_amount(amount, currency),
                        "metadata": {"out_refund_no": out_refund_no, "out_trade_no": out_trade_no},
                    },
                    options={"idempotency_key": idempotency_key},
                )
            )
        except Refused as refusal:
            raise ProviderRejected(refusal.status, refusal.code) from refusal
        return parse_refund(refund, out_refund_no=out_refund_no)

    @provider_call("query_refund")
    def query_refund(self, *, out_refund_no: str) -> RefundResult | None:
        out_trade_no = self.references.refund_charge(out_refund_no)
        intent_id = out_trade_no and self.references.payment_intent(out_trade_no)
        if not intent_id:
            return None
        try:
            listed = self.client.v1.refunds.list(params={"payment_intent": intent_id, "limit": 100})
            for item in listed.auto_paging_iter():
                refund = plain(item)
                if (refund.get("metadata") or {}).get("out_refund_no") == out_refund_no:
                    return parse_refund(refund, out_refund_no=out_refund_no)
        except stripe.StripeError as error:
            raise ProviderOutcomeUnknown(f"Stripe: {error}") from error
        except Refused as refusal:
            raise ProviderOutcomeUnknown(f"Stripe: {refusal}") from refusal
        return None

    # --- the statement -------------------------------------------------------------

    @provider_call("statement")
    def statement(self, *, day: date) -> Iterator[StatementEntry]:
        """The day's balance transactions (UTC), read newest first (stripe_statement)."""
        yield from balance_statement(self.client, day=day)

    # --- notifications -------------------------------------------------------------

    def verify_notification(
        self, *, headers: Mapping[str, str], raw_body: bytes
    ) -> Notification | RefundNotification:
        """``Stripe-Signature`` checked by the SDK (300 s tolerance), then the event read."""
        return parse_event(verified_event(headers, raw_body, secret=self.webhook_secret))
