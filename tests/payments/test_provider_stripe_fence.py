"""A fence is a fence: closing an attempt whose PaymentIntent id was never recorded
reaches Stripe (docs/design.md, "Money that moves after the fact").

Against localstripe (tests/stripe_emulator.py), each test with a server of its own:
the fence lists the PaymentIntents naming the attempt newest first, as Stripe
lists them, and localstripe lists oldest first, so a server holding other tests'
older PaymentIntents would end the listing before it reached this test's.
localstripe does not replay a create by its key either: where Stripe would hand
the fence (and a retry) the lost PaymentIntent again, localstripe makes a new one,
and the fence finds the lost one by the listing instead. Both are cancelled.
"""

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import stripe
from django.utils import timezone

from operations.audit.run import audit_run
from orders.models import Order
from payments.models import Payment, PaymentStatus
from payments.providers import ChargeStatus, ProviderOutcomeUnknown, get_provider
from payments.providers.stripe import StripeProvider
from payments.services import CLOSED_BY_RECONCILIATION, payment_create
from reconcile.recovery.unsettled_payments import run_once as reconcile_payments_once
from tests.conftest import new_key
from tests.stripe_emulator import TEST_KEY, WEBHOOK_SECRET, emulator, intents_of, localstripe_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stripe_shop(live_server: Any, settings: Any) -> Iterator[str]:
    """The shop on Stripe, against a localstripe of this test's own."""
    for url in localstripe_server():
        settings.PAYMENT_PROVIDER = "stripe"
        settings.STRIPE_API_BASE = url
        settings.STRIPE_API_KEY = TEST_KEY
        settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
        settings.SHOP_BASE_URL = live_server.url
        settings.PROVIDER_TIMEOUT_S = 5.0
        settings.RECONCILE_AFTER_S = 0
        yield url


@pytest.fixture
def lose_the_create_answer(monkeypatch: Any) -> None:
    """The next PaymentIntent create reaches Stripe, and its answer never comes back
    (a spy on our adapter, not the SDK: the create itself is real)."""
    original = StripeProvider.prepare_charge
    lost: list[str] = []

    def losing(self: StripeProvider, **terms: Any) -> str:
        intent_id = original(self, **terms)
        if not lost:
            lost.append(intent_id)
            raise ProviderOutcomeUnknown("the create's answer was lost on the way back")
        return intent_id

    monkeypatch.setattr(StripeProvider, "prepare_charge", losing)


def _status(url: str, intent_id: str) -> str:
    return str(emulator(url).v1.payment_intents.retrieve(intent_id)["status"])


def test_a_lost_create_answer_is_fenced_at_stripe_and_no_second_capture_follows(
    stripe_shop, lose_the_create_answer, pay, order
):
    # Given a pay whose PaymentIntent was created at Stripe, and whose answer was lost
    key = new_key()
    assert pay(key).status_code == 503
    payment = Payment.objects.get(order=order)
    assert (payment.status, payment.trade_no) == (PaymentStatus.PENDING, None)
    (lost,) = intents_of(stripe_shop, payment.out_trade_no)
    assert lost["status"] == "requires_confirmation"

    # When the reconciler fences the attempt
    assert reconcile_payments_once().rolled_back == 1

    # Then the fence reached Stripe: the lost PaymentIntent is cancelled, and the
    # attempt failed on Stripe's word, with the PaymentIntent it cancelled
    assert _status(stripe_shop, lost["id"]) == "canceled"
    fenced = Payment.objects.get(pk=payment.pk)
    assert (fenced.status, fenced.failure_code) == (PaymentStatus.FAILED, CLOSED_BY_RECONCILIATION)
    assert fenced.trade_no is not None
    assert _status(stripe_shop, fenced.trade_no) == "canceled"
    # And a retry that got the lost PaymentIntent back (Stripe replays the create to
    # the same key) cannot confirm it
    with pytest.raises(stripe.InvalidRequestError):
        emulator(stripe_shop).v1.payment_intents.confirm(lost["id"])
    # The first client's retry gets the attempt's final answer, and charges nothing
    assert pay(key).status_code == 402

    # When the customer pays in another tab
    assert pay(new_key()).status_code == 200

    # Then one capture in all, and the books agree
    captured = [
        intent["id"]
        for attempt in Payment.objects.filter(order=order)
        for intent in intents_of(stripe_shop, attempt.out_trade_no)
        if intent["status"] == "succeeded"
    ]
    assert len(captured) == 1
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    assert audit_run().findings == []


def test_the_fence_cancels_a_payment_intent_a_retry_recorded_while_it_ran(
    stripe_shop, order, user, monkeypatch
):
    # Given an attempt with nothing recorded, and a retry that records its
    # PaymentIntent while the fence is busy listing
    payment = payment_create(user_id=user.pk, order_number=order.number)
    provider = get_provider()
    assert isinstance(provider, StripeProvider)
    raced: list[str] = []
    listing = StripeProvider._intents_naming

    def retry_records_meanwhile(self: StripeProvider, out_trade_no: str, **kw: Any) -> list[Any]:
        found = listing(self, out_trade_no, **kw)
        intent_id = self._create(
            out_trade_no=out_trade_no,
            amount=payment.amount,
            currency=payment.currency,
            idempotency_key="a-retry-whose-create-localstripe-does-not-replay",
        )
        Payment.objects.filter(pk=payment.pk).update(trade_no=intent_id)
        raced.append(intent_id)
        return found

    monkeypatch.setattr(StripeProvider, "_intents_naming", retry_records_meanwhile)

    # When the fence runs
    answer = provider.close(out_trade_no=payment.out_trade_no)

    # Then the retry's PaymentIntent is cancelled too: it can never be confirmed
    assert answer.status is ChargeStatus.CLOSED
    assert _status(stripe_shop, raced[0]) == "canceled"
    assert {i["status"] for i in intents_of(stripe_shop, payment.out_trade_no)} == {"canceled"}


def test_the_fence_of_an_attempt_never_created_creates_and_cancels_it(stripe_shop, order, user):
    # Given an attempt whose create never reached Stripe
    payment = payment_create(user_id=user.pk, order_number=order.number)

    # When it is fenced
    answer = get_provider().close(out_trade_no=payment.out_trade_no)

    # Then "closed" is Stripe's word: the create, made now with the attempt's key,
    # is cancelled, so a later create with that key gets a cancelled PaymentIntent
    assert answer.status is ChargeStatus.CLOSED
    (intent,) = intents_of(stripe_shop, payment.out_trade_no)
    assert (intent["id"], intent["status"]) == (answer.trade_no, "canceled")


def test_the_fence_answers_a_capture_that_got_in_first(stripe_shop, order, user):
    # Given a lost create whose PaymentIntent someone confirmed anyway
    payment = payment_create(user_id=user.pk, order_number=order.number)
    client = emulator(stripe_shop)
    confirmed = client.v1.payment_intents.create(
        params={
            "amount": payment.amount,
            "currency": payment.currency.lower(),
            "payment_method": "pm_card_visa",
            "metadata": {"out_trade_no": payment.out_trade_no},
            "confirm": True,
        }
    )

    # When it is fenced
    answer = get_provider().close(out_trade_no=payment.out_trade_no)

    # Then the capture is the answer (rolled forward or refunded), never "closed"
    assert answer.status is ChargeStatus.SUCCESS
    assert answer.trade_no == confirmed["id"]


def test_the_fence_lists_only_payment_intents_since_the_attempt_began(stripe_shop, order, user):
    # Given a PaymentIntent naming the attempt
    payment = payment_create(user_id=user.pk, order_number=order.number)
    provider = get_provider()
    assert isinstance(provider, StripeProvider)
    made = emulator(stripe_shop).v1.payment_intents.create(
        params={
            "amount": payment.amount,
            "currency": payment.currency.lower(),
            "metadata": {"out_trade_no": payment.out_trade_no},
        }
    )

    # Then the listing finds it from the attempt's start, and never reads back past
    # an attempt's start (less the clocks' skew): from a day later, it is not read
    found = provider._intents_naming(payment.out_trade_no, since=payment.created_at)
    assert [intent["id"] for intent in found] == [made["id"]]
    later = timezone.now() + timedelta(days=1)
    assert provider._intents_naming(payment.out_trade_no, since=later) == []
