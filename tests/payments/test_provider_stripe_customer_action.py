"""3-D Secure at Stripe (localstripe's test card that needs it): the pay answers 202
with the PaymentIntent's client_secret and next_action, the same key answers 202 until
the payer authenticates, and a PaymentIntent still waiting past PAYMENT_ACTION_TIMEOUT_S
is cancelled and its attempt failed (docs/design.md, "Money that moves after the fact").

localstripe completes 3-D Secure through an endpoint of its own (``_authenticate``,
with the publishable key, as Stripe.js would).
"""

from datetime import timedelta
from typing import Any

import pytest
import requests
from django.utils import timezone

from idempotency.models import IdempotencyKey
from operations.audit.run import audit_run
from orders.models import Order
from payments.flows import PayPoint
from payments.models import LedgerEntry, Payment, PaymentStatus
from payments.providers import get_provider
from payments.services import CLOSED_BY_RECONCILIATION
from reconcile.recovery.unsettled_payments import run_once as reconcile_payments_once
from tests.conftest import new_key
from tests.stripe_emulator import emulator, intents_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def three_d_secure(stripe_shop, pay, monkeypatch, settings) -> Any:
    """The adapter confirms with a card that needs 3-D Secure; undo() goes back to one that
    does not."""
    card = emulator(stripe_shop).v1.payment_methods.create(
        params={
            "type": "card",
            "card": {"number": "4000002500003155", "exp_month": 12, "exp_year": 2030, "cvc": "123"},
        }
    )
    provider = get_provider()
    plain_card = provider.payment_method  # type: ignore[attr-defined]
    monkeypatch.setattr(provider, "payment_method", card["id"])
    settings.RECONCILE_AFTER_S = 0

    class Card:
        @staticmethod
        def undo() -> None:
            monkeypatch.setattr(provider, "payment_method", plain_card)

    return Card


def authenticate(url: str, intent: dict[str, Any]) -> None:
    answer = requests.post(
        f"{url}/v1/payment_intents/{intent['id']}/_authenticate",
        data={"client_secret": intent["client_secret"], "success": "true", "key": "pk_test_x"},
        timeout=5,
    )
    assert answer.status_code == 200, answer.text


def test_3d_secure_answers_202_with_the_client_secret_until_the_payer_authenticates(
    stripe_shop, pay, three_d_secure, order
):
    key = new_key()

    response = pay(key)

    # The client gets what Stripe.js needs; nothing is charged, nothing stored
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["code"] == "payment-action-required"
    payment = Payment.objects.get(order=order)
    (intent,) = intents_of(stripe_shop, payment.out_trade_no)
    assert intent["status"] == "requires_action"
    assert body["action"]["client_secret"] == intent["client_secret"]
    assert body["action"]["next_action"] == intent["next_action"]
    assert payment.status == PaymentStatus.PENDING
    assert IdempotencyKey.objects.get(key=key).recovery_point == PayPoint.CHARGE_PREPARED
    assert pay(key).status_code == 202  # asked again: still waiting

    # When the payer authenticates
    authenticate(stripe_shop, intent)

    # Then the same key answers the payment, stored
    paid = pay(key)
    assert paid.status_code == 200, paid.content
    assert pay(key).headers["Idempotent-Replayed"] == "true"
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    assert audit_run().findings == []


def test_a_3d_secure_never_completed_is_cancelled_after_the_timeout_and_paid_again(
    stripe_shop, pay, three_d_secure, order, settings
):
    key = new_key()
    assert pay(key).status_code == 202
    payment = Payment.objects.get(order=order)
    # Before its time is up, the reconciler leaves it
    assert reconcile_payments_once().awaiting_customer == 1
    Payment.objects.filter(pk=payment.pk).update(
        created_at=timezone.now() - timedelta(seconds=settings.PAYMENT_ACTION_TIMEOUT_S + 1),
        next_reconcile_at=None,
    )

    # When the reconciler runs past the payer's time
    assert reconcile_payments_once().rolled_back == 1

    # Then the PaymentIntent is cancelled at Stripe, and the attempt failed behind it
    (intent,) = intents_of(stripe_shop, payment.out_trade_no)
    assert intent["status"] == "canceled"
    fenced = Payment.objects.get(pk=payment.pk)
    assert (fenced.status, fenced.failure_code) == (PaymentStatus.FAILED, CLOSED_BY_RECONCILIATION)
    assert not LedgerEntry.objects.filter(payment=payment).exists()
    assert pay(key).json()["code"] == "payment-failed"
    # And the order is paid with another card, once
    three_d_secure.undo()
    assert pay(new_key()).status_code == 200
    assert audit_run().findings == []
