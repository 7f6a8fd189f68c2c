"""POST /api/v1/orders/{number}/pay/ against the sandbox, fault by fault."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from idempotency.models import IdempotencyKey
from orders.models import Order
from payments.flows import PayPoint
from payments.models import LedgerEntry, Payment
from reconcile.recovery import unsettled_payments as reconcile_payments
from tests.assertions import assert_paid_once
from tests.conftest import client_for, new_key
from tests.factories import ProductFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_pay_charges_once_and_the_order_becomes_paid(pay, order, user, wallet):
    response = pay()

    body = response.json()
    assert response.status_code == 200
    assert response["Idempotent-Replayed"] == "false"
    assert body["status"] == "PAID"
    assert body["payments"] == [
        {
            "out_trade_no": Payment.objects.get().out_trade_no,
            "status": "SUCCEEDED",
            "amount": order.amount,
            "currency": "CNY",
            "trade_no": Payment.objects.get().trade_no,
        }
    ]
    assert_paid_once(order, user, wallet)


def test_pay_replay_returns_the_same_answer_without_charging(pay, order, user, wallet):
    key = new_key()
    first = pay(key)

    replays = [pay(key) for _ in range(3)]

    assert [r["Idempotent-Replayed"] for r in replays] == ["true"] * 3
    assert all(r.json() == first.json() for r in replays)
    assert_paid_once(order, user, wallet)


def test_declined_is_402_stored_and_replayed_then_a_new_key_pays(pay, fault, order, user, wallet):
    fault("decline")
    key = new_key()

    declined = pay(key)
    replay = pay(key)

    assert declined.status_code == 402
    assert declined.json()["code"] == "payment-declined"
    assert replay.status_code == 402
    assert replay["Idempotent-Replayed"] == "true"
    assert Order.objects.get(pk=order.pk).status == "UNPAID"
    assert Payment.objects.get().status == "FAILED"
    assert wallet(user)["charged_total"] == 0
    # A 4xx is final for its key: paying again takes a new key.
    assert pay(new_key()).status_code == 200
    assert_paid_once(order, user, wallet)


def order_the_provider_refuses(create_order, settings) -> Order:
    """A shop whose amount limit was set above the provider's maximum, and an order
    for more than the sandbox ever charges (its MAX_AMOUNT is 10**12)."""
    settings.ORDER_MAX_AMOUNT = 10**13
    product = ProductFactory.create(price=10**12 + 1, stock=1)
    created = create_order(key=new_key(), sku=product.sku)
    assert created.status_code == 201
    return Order.objects.get(number=created.json()["number"])


def test_a_request_the_provider_refuses_is_a_final_402_not_unknown(
    pay, create_order, settings, user, wallet
):
    order = order_the_provider_refuses(create_order, settings)
    key = new_key()

    # When it is paid: the sandbox answers 400 validation-error, nothing charged
    refused = pay(key, number=order.number)
    replay = pay(key, number=order.number)

    # Then a final, stored 402 naming the refusal, not a 503 "unknown"
    assert refused.status_code == 402, refused.content
    assert refused.json()["code"] == "payment-declined"
    assert refused.json()["reason"] == "provider-rejected:validation-error"
    assert (replay.status_code, replay["Idempotent-Replayed"]) == (402, "true")
    assert replay.json() == refused.json()
    payment = Payment.objects.get(order=order)
    assert (payment.status, payment.failure_code, payment.trade_no) == (
        "FAILED",
        "provider-rejected:validation-error",
        None,
    )
    assert IdempotencyKey.objects.get(key=key).recovery_point == "finished"
    # and nothing moved anywhere
    assert Order.objects.get(pk=order.pk).status == "UNPAID"
    assert not LedgerEntry.objects.filter(order=order).exists()
    assert wallet(user)["charged_total"] == 0


def test_a_refusal_after_an_unanswered_request_is_not_proof_the_reconciler_fences_first(
    pay, create_order, settings, user, wallet
):
    # Given an attempt whose first request went unanswered (the provider was down)
    order = order_the_provider_refuses(create_order, settings)
    sandbox = settings.PROVIDER_BASE_URL
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        settings.PROVIDER_BASE_URL = f"http://127.0.0.1:{probe.getsockname()[1]}/sandbox"
    key = new_key()
    assert pay(key, number=order.number).status_code == 503
    settings.PROVIDER_BASE_URL = sandbox

    # When the same key resumes and the provider refuses the charge
    resumed = pay(key, number=order.number)

    # Then still unknown: the unanswered request might yet be charging
    assert resumed.status_code == 503
    assert resumed.json()["code"] == "payment-outcome-unknown"
    assert Payment.objects.get(order=order).status == "UNKNOWN"

    # And the reconciler fences it at the provider before failing it
    settings.RECONCILE_AFTER_S = 0
    assert reconcile_payments.run_once().rolled_back == 1
    assert Payment.objects.get(order=order).status == "FAILED"
    assert pay(key, number=order.number).json()["code"] == "payment-failed"
    assert wallet(user)["charged_total"] == 0


@pytest.mark.parametrize("mode", ["error_before_commit", "error_after_commit"])
def test_provider_5xx_is_503_unknown_and_the_same_key_resumes(
    pay, fault, order, user, wallet, mode
):
    fault(mode)
    key = new_key()

    unknown = pay(key)

    assert unknown.status_code == 503
    assert unknown.json()["code"] == "payment-outcome-unknown"
    assert unknown["Retry-After"] == "2"
    assert Payment.objects.get().status == "UNKNOWN"
    record = IdempotencyKey.objects.get(key=key)
    assert record.recovery_point == PayPoint.PAYMENT_CREATED  # not stored, resumable
    assert record.response_status is None
    assert record.lock_token is None

    # The retry asks the provider first: charged already (after_commit) or not at all.
    retried = pay(key)

    assert retried.status_code == 200
    assert retried["Idempotent-Replayed"] == "false"
    assert_paid_once(order, user, wallet)


def test_provider_timeout_after_charging_is_a_real_socket_timeout_then_resumes(
    pay, fault, order, user, wallet, settings
):
    settings.PROVIDER_TIMEOUT_S = 0.5
    # The provider answers long after our timeout, however slow this machine is.
    fault("timeout_after_commit", delay_s=5)
    key = new_key()

    started = time.monotonic()
    unknown = pay(key)
    elapsed = time.monotonic() - started

    assert unknown.status_code == 503
    assert 0.5 <= elapsed < 5  # our read timeout fired, not the provider's answer
    assert unknown.json()["reason"].startswith("POST /v1/charges: ReadTimeout")
    retried = pay(key)
    assert retried.status_code == 200
    assert_paid_once(order, user, wallet)


@pytest.mark.parametrize("mode", ["callback_duplicates", "callback_shuffle", "callback_drop"])
def test_notification_faults_do_not_change_the_synchronous_answer(
    pay, fault, order, user, wallet, mode
):
    fault(mode)

    assert pay().status_code == 200
    assert_paid_once(order, user, wallet)


def test_stacked_faults_late_and_notified_three_times(pay, fault, order, user, wallet, settings):
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", delay_s=1)
    fault("callback_duplicates", copies=3)
    key = new_key()

    assert pay(key).status_code == 503
    assert pay(key).status_code == 200
    assert_paid_once(order, user, wallet)


def test_same_key_while_the_provider_is_being_asked_is_409(
    pay, fault, order, user, wallet, settings
):
    # Given a pay request waiting on a slow provider (record committed at payment_created)
    settings.PROVIDER_TIMEOUT_S = 5
    fault("timeout_after_commit", delay_s=1.5)
    key = new_key()
    answers: dict[str, Any] = {}
    first = threading.Thread(target=lambda: answers.setdefault("first", pay(key)))
    first.start()
    deadline = time.monotonic() + 5
    while not IdempotencyKey.objects.filter(
        key=key, recovery_point=PayPoint.PAYMENT_CREATED
    ).exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)

    # When the client double-clicks
    second = pay(key)
    first.join()

    # Then the second is told to come back, and the first pays once
    assert second.status_code == 409
    assert second.json()["code"] == "idempotency-key-in-use"
    assert answers["first"].status_code == 200
    assert_paid_once(order, user, wallet)


# --- Not payable, bad input ------------------------------------------------------


def test_paying_a_paid_order_is_409_stored(pay, order):
    pay()
    key = new_key()

    again = pay(key)

    assert again.status_code == 409
    assert again.json()["code"] == "order-not-payable"
    assert IdempotencyKey.objects.get(key=key).response_status == 409
    assert Payment.objects.count() == 1


def test_paying_a_cancelled_order_is_409(pay, client, order):
    client.post(
        f"/api/v1/orders/{order.number}/cancel/",
        format="json",
        headers={"Idempotency-Key": new_key()},
    )

    response = pay()

    assert response.status_code == 409
    assert response.json()["code"] == "order-not-payable"
    assert Payment.objects.count() == 0


def test_paying_someone_elses_order_is_404_and_not_stored(pay, other_user):
    key = new_key()

    response = pay(key, api=client_for(other_user))

    assert response.status_code == 404
    assert not IdempotencyKey.objects.filter(key=key).exists()
    assert Payment.objects.count() == 0


@pytest.mark.parametrize("body", [[1, 2], "just a string"])
def test_malformed_pay_body_is_400(pay, body):
    response = pay(body=body)

    assert response.status_code == 400
    assert response.json()["code"] == "validation-error"
    assert Payment.objects.count() == 0


class _BrokenProvider(BaseHTTPRequestHandler):
    """A provider that answers nonsense: garbage JSON, or a status nobody expects."""

    answers: list[tuple[int, bytes]] = []

    def do_POST(self) -> None:
        status, body = self.answers.pop(0) if self.answers else (200, b"{}")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    "answer",
    [
        (200, b"<html>not json</html>"),
        (200, json.dumps({"status": "SUCCESS"}).encode()),  # no out_trade_no, no trade_no
        (200, json.dumps({"out_trade_no": "other", "status": "MAYBE"}).encode()),
        (202, b"{}"),
        (418, b"{}"),
    ],
)
def test_garbage_from_the_provider_is_unknown_never_success(pay, order, settings, answer):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BrokenProvider)
    _BrokenProvider.answers = [answer]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.PROVIDER_BASE_URL = f"http://127.0.0.1:{server.server_port}"
    try:
        response = pay()
    finally:
        server.shutdown()
        server.server_close()

    assert response.status_code == 503
    assert response.json()["code"] == "payment-outcome-unknown"
    assert Payment.objects.get().status == "UNKNOWN"
    assert Order.objects.get(pk=order.pk).status == "UNPAID"
    assert LedgerEntry.objects.count() == 0
