"""Customer action (docs/design.md, "Money that moves after the fact"): the provider
waits for the customer (the sandbox's requires_action fault, its 3-D Secure), the pay
answers 202 with what the client needs, the same key asks again until the attempt
settles, and an attempt still waiting after PAYMENT_ACTION_TIMEOUT_S is fenced and
failed; the order can then be paid again, cancelled or expired."""

from datetime import timedelta
from typing import Any

import pytest
import requests
from django.utils import timezone

from demo.sandbox.models import Charge
from idempotency.models import IdempotencyKey
from operations.audit.run import audit_run
from orders.models import Order, Product
from payments.flows import PayPoint
from payments.models import Payment, PaymentStatus
from payments.services import CLOSED_BY_RECONCILIATION
from reconcile.recovery import expiry
from reconcile.recovery.unsettled_payments import action_deadline
from reconcile.recovery.unsettled_payments import run_once as reconcile_payments_once
from tests.conftest import new_key

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting_pay(pay, fault, settings) -> tuple[str, dict[str, Any]]:
    """A pay the provider answered "the customer must act": (its key, the 202's body)."""
    settings.RECONCILE_AFTER_S = 0
    fault("requires_action")
    key = new_key()
    response = pay(key)
    assert response.status_code == 202, response.content
    return key, response.json()


def customer(body: dict[str, Any], result: str) -> Any:
    """The customer acts on the provider's page (its API), with what the 202 carried."""
    action = body["action"]
    return requests.post(
        action["next_action"]["url"],
        json={"client_secret": action["client_secret"], "result": result},
        timeout=5,
    )


def age(payment: Payment, seconds: float) -> None:
    Payment.objects.filter(pk=payment.pk).update(
        created_at=timezone.now() - timedelta(seconds=seconds)
    )


def test_the_pay_answers_202_with_what_the_client_needs_and_stores_nothing(waiting_pay, order):
    key, body = waiting_pay

    assert body["code"] == "payment-action-required"
    assert body["status"] == 202
    assert body["action"]["client_secret"]
    assert body["action"]["next_action"]["url"].endswith(f"/{body['payment']}/action")
    payment = Payment.objects.get(order=order)
    assert payment.out_trade_no == body["payment"]
    assert (payment.status, payment.action_required_at is not None) == (
        PaymentStatus.PENDING,
        True,
    )
    # Not finished, nothing stored: the record keeps its recovery point.
    record = IdempotencyKey.objects.get(key=key)
    assert (record.recovery_point, record.response_status) == (PayPoint.PAYMENT_CREATED, None)
    assert Order.objects.get(pk=order.pk).status == Order.Status.UNPAID


def test_the_same_key_answers_202_until_the_customer_completes_then_200_stored(
    waiting_pay, pay, order
):
    key, body = waiting_pay
    again = pay(key)
    assert again.status_code == 202
    assert again.json()["action"] == body["action"]

    # When the customer completes it at the provider
    assert customer(body, "complete").json()["status"] == "SUCCESS"

    # Then the same key answers the settled attempt, and stores it
    paid = pay(key)
    assert paid.status_code == 200, paid.content
    assert paid.headers["Idempotent-Replayed"] == "false"
    assert paid.json()["status"] == Order.Status.PAID
    replay = pay(key)
    assert (replay.status_code, replay.headers["Idempotent-Replayed"]) == (200, "true")
    assert Payment.objects.get(order=order).status == PaymentStatus.SUCCEEDED
    assert audit_run().findings == []


def test_an_abandoned_action_answers_the_decline(waiting_pay, pay, order):
    key, body = waiting_pay
    customer(body, "abandon")

    declined = pay(key)

    assert declined.status_code == 402
    assert declined.json()["code"] == "payment-declined"
    assert Payment.objects.get(order=order).status == PaymentStatus.FAILED
    assert pay(new_key()).status_code == 200  # the order can be paid again
    assert audit_run().findings == []


def test_the_reconciler_leaves_a_waiting_attempt_until_its_time_is_up(waiting_pay, order, settings):
    payment = Payment.objects.get(order=order)

    counts = reconcile_payments_once()

    # Asked, and left exactly as it is: due again when the customer's time is up
    assert (counts.awaiting_customer, counts.rolled_back) == (1, 0)
    left = Payment.objects.get(pk=payment.pk)
    assert left.status == PaymentStatus.PENDING
    assert left.next_reconcile_at == action_deadline(left)
    assert left.reconcile_attempts == 0  # not a failure to back off from
    assert Charge.objects.get(out_trade_no=payment.out_trade_no).status == "ACTION_REQUIRED"
    # In flight for the audit too, until its time is up, its request included
    IdempotencyKey.objects.update(
        created_at=timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_LOCK_TIMEOUT + 1)
    )
    assert audit_run().findings == []
    age(payment, settings.PAYMENT_ACTION_TIMEOUT_S + 1)
    assert sorted(f.invariant for f in audit_run().findings) == [
        "payment-not-left-unsettled",
        "record-not-stuck-in-progress",
    ]


def test_past_the_timeout_it_is_fenced_failed_and_the_order_can_be_paid_again(
    waiting_pay, pay, order, settings
):
    key, body = waiting_pay
    payment = Payment.objects.get(order=order)
    age(payment, settings.PAYMENT_ACTION_TIMEOUT_S + 1)
    Payment.objects.filter(pk=payment.pk).update(next_reconcile_at=None)

    # When the reconciler runs past the customer's time
    assert reconcile_payments_once().rolled_back == 1

    # Then the attempt is fenced at the provider and failed behind the fence
    assert Charge.objects.get(out_trade_no=payment.out_trade_no).status == "CLOSED"
    fenced = Payment.objects.get(pk=payment.pk)
    assert (fenced.status, fenced.failure_code) == (PaymentStatus.FAILED, CLOSED_BY_RECONCILIATION)
    # The key's final answer is stored: 402 payment-failed
    assert pay(key).status_code == 402
    assert pay(key).json()["code"] == "payment-failed"
    # The customer who comes back now cannot pay that attempt
    assert customer(body, "complete").status_code == 409
    # And the order can be paid again, once
    assert pay(new_key()).status_code == 200
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    assert audit_run().findings == []


def test_a_customer_who_completes_at_the_deadline_is_rolled_forward(
    waiting_pay, pay, order, settings
):
    key, body = waiting_pay
    payment = Payment.objects.get(order=order)
    age(payment, settings.PAYMENT_ACTION_TIMEOUT_S + 1)
    Payment.objects.filter(pk=payment.pk).update(next_reconcile_at=None)
    customer(body, "complete")

    assert reconcile_payments_once().rolled_forward == 1

    assert Payment.objects.get(pk=payment.pk).status == PaymentStatus.SUCCEEDED
    assert pay(key).status_code == 200
    assert audit_run().findings == []


def test_cancel_and_expiry_wait_for_the_fence_then_release_the_stock_once(
    waiting_pay, client, order, settings
):
    product = Product.objects.get(sku=order.lines.get().sku)
    held = product.stock
    cancel = f"/api/v1/orders/{order.number}/cancel/"
    settings.ORDER_TTL_S = 0

    # While the customer may still act: not cancellable, not expired
    refused = client.post(cancel, headers={"Idempotency-Key": new_key()})
    assert (refused.status_code, refused.json()["code"]) == (409, "order-not-cancellable")
    assert expiry.run_once().skipped_live_attempt == 1

    # After the fence: the order expires as usual, its stock released once
    payment = Payment.objects.get(order=order)
    age(payment, settings.PAYMENT_ACTION_TIMEOUT_S + 1)
    Payment.objects.filter(pk=payment.pk).update(next_reconcile_at=None)
    reconcile_payments_once()
    assert expiry.run_once().expired == 1
    assert Order.objects.get(pk=order.pk).status == Order.Status.CANCELLED
    assert Product.objects.get(pk=product.pk).stock == held + order.lines.get().quantity
    assert expiry.run_once().expired == 0
    assert audit_run().findings == []


def test_cancel_works_after_the_fence(waiting_pay, client, order, settings):
    payment = Payment.objects.get(order=order)
    age(payment, settings.PAYMENT_ACTION_TIMEOUT_S + 1)
    Payment.objects.filter(pk=payment.pk).update(next_reconcile_at=None)
    reconcile_payments_once()

    cancelled = client.post(
        f"/api/v1/orders/{order.number}/cancel/", headers={"Idempotency-Key": new_key()}
    )

    assert cancelled.status_code == 200, cancelled.content
    assert cancelled.json()["status"] == Order.Status.CANCELLED
    assert audit_run().findings == []


def test_the_openapi_schema_documents_the_202(client):
    schema = client.get("/api/schema/", {"format": "json"}).json()

    pay_answers = schema["paths"]["/api/v1/orders/{number}/pay/"]["post"]["responses"]
    assert "payment-action-required" in pay_answers["202"]["description"]
    documented = pay_answers["202"]["content"]["application/problem+json"]["schema"]["$ref"]
    component = schema["components"]["schemas"][documented.rsplit("/", 1)[-1]]
    assert {"code", "payment", "action"} <= set(component["properties"])
