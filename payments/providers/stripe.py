"""Stripe, through its official SDK (docs/design.md, "Provider adapters").

How the protocol maps onto Stripe (CONTRACT.md has the whole table):

- ``prepare_charge``: a PaymentIntent is created with an idempotency key derived
  from the attempt and ``metadata.out_trade_no``; the flow commits its id (as
  the attempt's ``trade_no``) in a recovery point of its own, then ``charge``
  confirms that very PaymentIntent. A crash or a lost answer between the two
  resumes with the same PaymentIntent: Stripe cannot be asked "which
  PaymentIntent is out_trade_no?" (its search is eventually consistent, and the
  emulator the tests use has none), so the record is what finds it again.
- ``query``: retrieve (the truth) the PaymentIntent the caller names (a
  statement line's, an event's ``trade_no``), or the one recorded for the
  attempt; with neither, the one whose ``metadata.out_trade_no`` is ours,
  found by Stripe's search (eventually consistent: what it finds is
  retrieved, and what it has not indexed yet is found by a later pass; the
  reconciler asks only about attempts older than RECONCILE_AFTER_S). Where the
  API has no search (localstripe answers 404), the PaymentIntents are listed
  and their metadata read instead: complete, and slower the more there are.
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
  The PaymentIntent is the one the caller names (a stray capture's
  ``trade_no``: no attempt of ours recorded it), or the attempt's recorded one.
- ``query_dispute``: retrieve the Dispute (its PaymentIntent expanded, for our
  reference); disputes arrive as ``charge.dispute.*`` events and on the statement.
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
    DisputeNotification,
    DisputeResult,
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
    parse_dispute,
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
    def query(self, *, out_trade_no: str, trade_no: str | None = None) -> ChargeResult | None:
        intent_id = (
            trade_no
            or self.references.payment_intent(out_trade_no)
            or self._find_intent(out_trade_no)
        )
        if intent_id is None:
            return None  # Stripe holds no PaymentIntent of this reference
        return parse_intent(self._retrieve(intent_id), out_trade_no=out_trade_no)

    def _find_intent(self, out_trade_no: str) -> str | None:
        """The PaymentIntent naming ``out_trade_no`` that no attempt of ours recorded (a
        lost row): the succeeded one if any, else the newest. Search, or list where
        the API has none (see the module docstring)."""
        if not out_trade_no:
            return None
        escaped = out_trade_no.replace("\\", "\\\\").replace("'", "\\'")
        try:
            found = call(
                lambda: self.client.v1.payment_intents.search(
                    params={"query": f"metadata['out_trade_no']:'{escaped}'", "limit": 100}
                )
            )
            named = found.get("data") or []
        except Refused as refusal:
            if refusal.status != 404:
                raise ProviderOutcomeUnknown(f"Stripe search: {refusal}") from refusal
            named = self._intents_naming(out_trade_no)
        if not named:
            return None
        succeeded = [intent for intent in named if intent.get("status") == "succeeded"]
        newest = max(succeeded or named, key=lambda intent: intent.get("created") or 0)
        return str(newest["id"])

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
        for intent in self._intents_naming(out_trade_no, since=terms.created_at):
            intent_id = str(intent["id"])
            if intent_id not in intent_ids:
                intent_ids.append(intent_id)
        recorded = self.references.payment_intent(out_trade_no)
        if recorded is not None and recorded not in intent_ids:
            intent_ids.append(recorded)
        answers = [self._cancel(intent_id, out_trade_no=out_trade_no) for intent_id in intent_ids]
        captured = [answer for answer in answers if answer.status is ChargeStatus.SUCCESS]
        return captured[0] if captured else answers[0]

    def _intents_naming(self, out_trade_no: str, *, since: datetime | None = None) -> list[Any]:
        """The PaymentIntents naming ``out_trade_no`` (created since ``since``, if given).

        Stripe's list (not its search, which lags behind writes), newest first: with
        ``since``, read until a PaymentIntent older than the attempt (less the clocks'
        skew); without, to the end, where the API has no search (slower the more
        there are).
        """
        oldest = None if since is None else int((since - CLOCK_SKEW).timestamp())
        found: list[Any] = []
        try:
            listed = self.client.v1.payment_intents.list(params={"limit": LIST_PAGE})
            for item in listed.auto_paging_iter():
                intent = plain(item)
                created = intent.get("created")
                if oldest is not None and (not isinstance(created, int) or created < oldest):
                    break
                if intent_reference(intent) == out_trade_no:
                    found.append(intent)
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
        trade_no: str | None = None,
    ) -> RefundResult:
        intent_id: str | None
        currency: str | None
        if trade_no is not None:
            # A charge no attempt of ours recorded (a stray): its terms from Stripe.
            intent = self._retrieve(trade_no)
            check_intent(intent, out_trade_no=out_trade_no)
            intent_id, currency = trade_no, str(intent["currency"]).upper()
        else:
            intent_id = self.references.payment_intent(out_trade_no)
            currency = self.references.currency(out_trade_no)
        if intent_id is None or currency is None:
            raise ProviderRejected(404, "no_payment_intent")  # nothing Stripe could refund
        # Stripe drops a metadata key whose value is empty: a charge naming no
        # reference of ours is refunded with none.
        metadata = {"out_refund_no": out_refund_no, "out_trade_no": out_trade_no or None}
        try:
            refund = call(
                lambda: self.client.v1.refunds.create(
                    params={
                        "payment_intent": intent_id,
                        "amount": to_stripe_amount(amount, currency),
                        "metadata": {k: v for k, v in metadata.items() if v},
                    },
                    options={"idempotency_key": idempotency_key},
                )
            )
        except Refused as refusal:
            raise ProviderRejected(refusal.status, refusal.code) from refusal
        return parse_refund(refund, out_refund_no=out_refund_no)

    @provider_call("query_refund")
    def query_refund(
        self, *, out_refund_no: str, trade_no: str | None = None
    ) -> RefundResult | None:
        out_trade_no = self.references.refund_charge(out_refund_no)
        intent_id = trade_no or (out_trade_no and self.references.payment_intent(out_trade_no))
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

    # --- disputes ------------------------------------------------------------------

    @provider_call("query_dispute")
    def query_dispute(self, *, dispute_id: str) -> DisputeResult | None:
        try:
            dispute = call(
                lambda: self.client.v1.disputes.retrieve(
                    dispute_id, params={"expand": ["payment_intent"]}
                )
            )
        except Refused as refusal:
            if refusal.status == 404:
                return None
            raise ProviderOutcomeUnknown(f"Dispute {dispute_id}: {refusal}") from refusal
        return parse_dispute(dispute)

    # --- the statement -------------------------------------------------------------

    @provider_call("statement")
    def statement(self, *, day: date) -> Iterator[StatementEntry]:
        """The day's balance transactions (UTC), read newest first (stripe_statement)."""
        yield from balance_statement(self.client, day=day)

    # --- notifications -------------------------------------------------------------

    def verify_notification(
        self, *, headers: Mapping[str, str], raw_body: bytes
    ) -> Notification | RefundNotification | DisputeNotification:
        """``Stripe-Signature`` checked by the SDK (300 s tolerance), then the event read."""
        return parse_event(verified_event(headers, raw_body, secret=self.webhook_secret))
