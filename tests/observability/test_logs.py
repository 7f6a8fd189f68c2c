"""Logs that follow one payment: one request id (or its references) on every line, in
the shop, the provider, the callback and the worker; never a secret."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.conf import settings as django_settings

from callbacks.models import ProviderNotification
from operations.statements.passes import pass_run_once
from orders.models import Shipment
from payments.models import Payment, Refund
from payments.services import provider_idempotency_key
from tests.conftest import new_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def worker_lines(worker: Any, since: int) -> list[dict[str, Any]]:
    """The worker's output since ``since``: every line must be a JSON log line."""
    return [json.loads(line) for line in worker.log[since:] if line.strip()]


def secrets_of(user: Any, payment: Payment, key: str) -> list[str]:
    return [
        django_settings.SECRET_KEY,
        django_settings.SANDBOX_WEBHOOK_SECRET,
        django_settings.PROVIDER_API_KEY,
        user.auth_token.key,
        key,  # the customer's Idempotency-Key (only its hash may appear)
        provider_idempotency_key(payment),
        "Authorization",
        "Bearer",
        "v1=",  # a Sandbox-Signature value
    ]


def test_one_pay_is_followed_by_one_request_id_and_leaks_no_secret(
    worker, client, pay, fault, order, user, settings, json_logs
):
    # Given a slow provider (it charges, then answers after our timeout) that sends
    # its notification three times
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", delay_s=1)
    fault("callback_duplicates", copies=3)
    key, request_id = new_key(), f"pay-{uuid.uuid4().hex}"
    since, shop_since = len(worker.log), len(json_logs())

    # When the customer pays (with a gateway's request id), the notifications are
    # delivered by the worker, the order is shipped, and the customer retries
    first = client.post(
        f"/api/v1/orders/{order.number}/pay/",
        format="json",
        headers={"Idempotency-Key": key, "X-Request-ID": request_id},
    )
    worker.wait_for(lambda: Shipment.objects.filter(order=order).exists(), what="shipment")
    worker.wait_for(worker.idle, what="every copy delivered")
    retry = pay(key)
    worker.wait_for(  # the provider's late answer, long after we stopped waiting for it
        lambda: any("sandbox-charge-create" in line["msg"] for line in json_logs()[shop_since:]),
        what="the provider's answer to be logged",
    )

    # Then
    assert first.status_code == 503
    assert first["X-Request-ID"] == request_id
    assert retry.status_code == 200
    payment = Payment.objects.get(order=order)
    shop = json_logs()[shop_since:]
    tasks = worker_lines(worker, since)
    lines = shop + tasks
    # ... every line names the request, the attempt or the order
    for line in lines:
        assert (
            line.get("request_id") == request_id
            or line.get("out_trade_no") == payment.out_trade_no
            or line.get("order_number") == order.number
        ), line
    # ... the one request id reached each hop: shop, provider, callback, worker tasks
    followed = [line for line in lines if line.get("request_id") == request_id]
    access = {
        line["msg"].rsplit(" ", 2)[0] for line in followed if line["logger"] == "onceshop.access"
    }
    assert {"POST order-pay 503", "POST sandbox-charge-create 200"} <= access, access
    assert any(
        line["logger"] == "callbacks.api" and line["out_trade_no"] == payment.out_trade_no
        for line in followed
    )
    ran = {line.get("task") for line in tasks if line.get("request_id") == request_id}
    assert {"demo.sandbox.tasks.deliver_notification", "orders.tasks.fulfil_order"} <= ran, ran
    assert all(line.get("key_hash") != key for line in lines)
    # ... and no line carries a secret, a token, a signature or the key
    text = "\n".join(json.dumps(line) for line in lines)
    for secret in secrets_of(user, payment, key):
        assert secret not in text


def test_one_refund_is_followed_by_one_request_id_and_leaks_no_secret(
    worker, client, refund, fault, paid_order, user, settings, json_logs
):
    # Given a paid order and a provider that refunds, answers after our timeout, and
    # notifies the refund three times
    worker.wait_for(worker.idle, what="the payment's own tasks")
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", target="refund", delay_s=1)
    fault("callback_duplicates", target="refund", copies=3)
    key, request_id = new_key(), f"refund-{uuid.uuid4().hex}"
    since, shop_since = len(worker.log), len(json_logs())

    # When the customer asks for a refund (with a gateway's request id), the worker
    # delivers the notifications, and the customer retries with the same key
    first = client.post(
        f"/api/v1/orders/{paid_order.number}/refunds/",
        {},
        format="json",
        headers={"Idempotency-Key": key, "X-Request-ID": request_id},
    )
    worker.wait_for(
        lambda: ProviderNotification.objects.filter(event="refund").count() >= 1,
        what="the refund's notification",
    )
    worker.wait_for(worker.idle, what="every copy delivered")
    retry = refund(key)
    worker.wait_for(
        lambda: any("sandbox-refund-create" in line["msg"] for line in json_logs()[shop_since:]),
        what="the provider's answer to be logged",
    )

    # Then
    assert (first.status_code, retry.status_code) == (503, 200)
    attempt = Refund.objects.get(order=paid_order)
    lines = json_logs()[shop_since:] + worker_lines(worker, since)
    # ... every line names the request, the refund or the order
    for line in lines:
        assert (
            line.get("request_id") == request_id
            or line.get("out_refund_no") == attempt.refund_no
            or line.get("order_number") == paid_order.number
        ), line
    # ... the one request id reached the shop, the provider, the callback and the worker
    followed = [line for line in lines if line.get("request_id") == request_id]
    access = {
        line["msg"].rsplit(" ", 2)[0] for line in followed if line["logger"] == "onceshop.access"
    }
    assert {"POST order-refund 503", "POST sandbox-refund-create 200"} <= access, access
    assert any(
        line["logger"] == "callbacks.api" and line.get("out_refund_no") == attempt.refund_no
        for line in followed
    )
    ran = {line.get("task") for line in followed if line.get("task")}
    assert "demo.sandbox.tasks.deliver_notification" in ran, ran
    # ... and no line carries a secret, a token, a signature or the key
    text = "\n".join(json.dumps(line) for line in lines)
    for secret in secrets_of(user, attempt.payment, key):
        assert secret not in text


def test_the_reconcilers_lines_about_a_payment_carry_its_out_trade_no(
    pay, fault, order, settings, json_logs
):
    # Given a timed-out pay whose notification never comes
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", delay_s=1)
    fault("callback_drop")
    assert pay().status_code == 503
    payment = Payment.objects.get(order=order)
    since = len(json_logs())

    # When a reconcile pass resolves it
    settings.RECONCILE_AFTER_S = 0
    pass_run_once()

    # Then every line it wrote about the attempt names it
    about = [
        line for line in json_logs()[since:] if line["logger"].startswith(("reconcile", "onceshop"))
    ]
    assert any("rolled_forward" in line["msg"] for line in about), about
    for line in about:
        assert line.get("out_trade_no") == payment.out_trade_no, line


def test_the_reconcilers_lines_about_a_refund_carry_its_out_refund_no(
    refund, fault, paid_order, settings, json_logs
):
    # Given a timed-out refund whose notification never comes
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", target="refund", delay_s=1)
    fault("callback_drop", target="refund")
    assert refund().status_code == 503
    attempt = Refund.objects.get(order=paid_order)
    since = len(json_logs())

    # When a reconcile pass resolves it
    settings.RECONCILE_AFTER_S = 0
    pass_run_once()

    # Then every line it wrote about the refund names it (the provider's side too)
    about = [
        line for line in json_logs()[since:] if line["logger"].startswith(("reconcile", "onceshop"))
    ]
    assert any("reconciled: refunded" in line["msg"] for line in about), about
    for line in about:
        assert line.get("out_refund_no") == attempt.refund_no, line
