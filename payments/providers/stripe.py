"""Stripe, through its official SDK (DESIGN.md section 5 "Provider adapters").

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
- ``close`` (the fence): cancel. Nothing recorded: there is nothing to fence,
  the answer is CLOSED. Already succeeded: Stripe refuses the cancel, and the
  PaymentIntent as retrieved (SUCCESS) is the answer: the capture is the truth.
- ``refund`` / ``query_refund``: a Refund of the PaymentIntent with a derived
  key and ``metadata.out_refund_no``; found again in the PaymentIntent's refunds.
- ``statement``: the day's balance transactions, newest first, as Stripe lists them.
- Notifications: ``Stripe-Signature`` verified by the SDK (``stripe.Webhook``).

Errors: no answer, a 5xx, a 429 or an idempotency conflict is
ProviderOutcomeUnknown; any other 4xx carries Stripe's code as ProviderRejected
(a card decline is not one: it is the attempt's DECLINED answer).

The payment method: a real integration collects it in the browser (Stripe.js)
and confirms with it; this adapter confirms server-side with one configured
PaymentMethod (``pm_card_visa``, Stripe's test card, by default), which is
enough for test mode and the emulator, and is the one line a real shop changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Protocol

import stripe
from django.conf import settings

from payments.providers.base import (
    ChargeResult,
    ChargeStatus,
    Notification,
    NotificationMalformed,
    NotificationSignatureInvalid,
    ProviderOutcomeUnknown,
    ProviderRejected,
    RefundNotification,
    RefundResult,
    StatementEntry,
    StatementKind,
)
from payments.providers.observed import provider_call
from payments.providers.stripe_parsing import (
    check_intent,
    from_stripe_amount,
    parse_event,
    parse_intent,
    parse_refund,
    to_stripe_amount,
)

SIGNATURE_HEADER = "Stripe-Signature"
SIGNATURE_TOLERANCE_S = 300  # Stripe's own default: a replayed webhook older than this is refused
TEST_PAYMENT_METHOD = "pm_card_visa"


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
        intent = _call(
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
            intent = _call(
                lambda: self.client.v1.payment_intents.confirm(
                    intent_id,
                    params={"expand": ["latest_charge"]},
                    options={"idempotency_key": f"{idempotency_key}:confirm"},
                )
            )
        except _Refused:
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
            # No PaymentIntent was recorded, so none can ever be confirmed: fenced already.
            return ChargeResult(
                out_trade_no=out_trade_no,
                status=ChargeStatus.CLOSED,
                trade_no=None,
                amount=None,
                currency=None,
            )
        try:
            intent = _call(
                lambda: self.client.v1.payment_intents.cancel(
                    intent_id, params={"expand": ["latest_charge"]}
                )
            )
        except _Refused:
            # Not cancellable: it succeeded (the capture is the truth) or is cancelled already.
            intent = self._retrieve(intent_id)
        result = parse_intent(intent, out_trade_no=out_trade_no)
        if result is None:
            raise ProviderOutcomeUnknown(f"PaymentIntent {intent_id} was not cancelled")
        return result

    def _retrieve(self, intent_id: str) -> Any:
        try:
            return _call(
                lambda: self.client.v1.payment_intents.retrieve(
                    intent_id, params={"expand": ["latest_charge"]}
                )
            )
        except _Refused as refusal:
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
            refund = _call(
                lambda: self.client.v1.refunds.create(
                    params={
                        "payment_intent": intent_id,
                        "amount": to_stripe_amount(amount, currency),
                        "metadata": {"out_refund_no": out_refund_no, "out_trade_no": out_trade_no},
                    },
                    options={"idempotency_key": idempotency_key},
                )
            )
        except _Refused as refusal:
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
                refund = _plain(item)
                if (refund.get("metadata") or {}).get("out_refund_no") == out_refund_no:
                    return parse_refund(refund, out_refund_no=out_refund_no)
        except stripe.StripeError as error:
            raise ProviderOutcomeUnknown(f"Stripe: {error}") from error
        except _Refused as refusal:
            raise ProviderOutcomeUnknown(f"Stripe: {refusal}") from refusal
        return None

    # --- the statement -------------------------------------------------------------

    @provider_call("statement")
    def statement(self, *, day: date) -> Iterator[StatementEntry]:
        """The day's balance transactions (UTC), read newest first until the day before.

        A charge's line names the PaymentIntent (our ``trade_no``) and its
        ``out_trade_no``; a refund's, the Refund and its ``out_refund_no``.
        """
        start = int(datetime.combine(day, time(), tzinfo=UTC).timestamp())
        end = start + int(timedelta(days=1).total_seconds())
        try:
            listed = self.client.v1.balance_transactions.list(
                params={"limit": 100, "expand": ["data.source"]}
            )
            line = 1
            for item in listed.auto_paging_iter():
                txn = _plain(item)
                if txn["created"] >= end:
                    continue
                if txn["created"] < start:
                    return
                line += 1
                yield self._statement_entry(txn, line=line)
        except stripe.StripeError as error:
            raise ProviderOutcomeUnknown(f"Stripe: {error}") from error

    def _statement_entry(self, txn: Any, *, line: int) -> StatementEntry:
        source: Any = txn["source"]
        if txn["type"] == "refund":
            kind, provider_id = StatementKind.REFUND, str(source["id"])
            reference = (source.get("metadata") or {}).get("out_refund_no", "")
        else:
            # A charge's line is the PaymentIntent's (our trade_no), named by its metadata.
            kind, provider_id = StatementKind.CHARGE, str(source["payment_intent"])
            intent = _plain(self.client.v1.payment_intents.retrieve(provider_id))
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

    # --- notifications -------------------------------------------------------------

    def verify_notification(
        self, *, headers: Mapping[str, str], raw_body: bytes
    ) -> Notification | RefundNotification:
        """``Stripe-Signature`` checked by the SDK (300 s tolerance), then the event read."""
        signature = headers.get(SIGNATURE_HEADER)
        if not signature:
            raise NotificationSignatureInvalid(f"no {SIGNATURE_HEADER} header")
        try:
            event = stripe.Webhook.construct_event(
                raw_body, signature, self.webhook_secret, tolerance=SIGNATURE_TOLERANCE_S
            )
        except stripe.SignatureVerificationError as error:
            raise NotificationSignatureInvalid(str(error)) from error
        except ValueError as error:  # signed, but not JSON
            raise NotificationMalformed(str(error)) from error
        return parse_event(_plain(event))


def _plain(answer: Any) -> Any:
    return answer.to_dict() if isinstance(answer, stripe.StripeObject) else answer


class _Refused(ProviderRejected):
    """A 4xx with Stripe's error code that is not an outcome-unknown.

    A ProviderRejected, so a refusal no call site reads (the create's: an unknown
    payment method, a currency Stripe does not take) reaches the flow as the
    protocol's refusal, never as an error of its own.
    """


def _call(request: Callable[[], Any]) -> Any:
    """One SDK call, its errors as the protocol's (see the module docstring); the
    object it returns as plain data (dicts and lists, as Stripe's JSON)."""
    try:
        return _plain(request())
    except (stripe.APIConnectionError, stripe.RateLimitError, stripe.IdempotencyError) as error:
        raise ProviderOutcomeUnknown(f"Stripe: {type(error).__name__}: {error}") from error
    except stripe.StripeError as error:
        status = error.http_status
        if status is None or status >= 500 or status in (408, 409, 422) or error.json_body is None:
            raise ProviderOutcomeUnknown(f"Stripe: HTTP {status}: {error}") from error
        raise _Refused(status, error.code or type(error).__name__) from error
