"""The sandbox adapter against the real sandbox over HTTP (pytest-django's live server):
refunds as the shop will call them, replays, refusals and unknown outcomes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from demo.sandbox import signing
from demo.sandbox.delivery import encode_body
from demo.sandbox.models import Notification
from payments.providers import (
    ChargeStatus,
    PaymentProvider,
    ProviderOutcomeUnknown,
    ProviderRejected,
    RefundNotification,
    RefundResult,
    RefundStatus,
    get_provider,
)

pytestmark = pytest.mark.django_db(transaction=True)

NOTIFY_URL = "http://127.0.0.1:9/callbacks/sandbox/"  # the worker is not running here


@pytest.fixture(autouse=True)
def notify_allow_list(settings: Any) -> None:
    """The provider accepts NOTIFY_URL only when its allow-list names it."""
    settings.SANDBOX_NOTIFY_URLS = [NOTIFY_URL]


def ref(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


@pytest.fixture
def provider(sandbox: str) -> PaymentProvider:
    return get_provider()


@pytest.fixture
def paid(provider: PaymentProvider) -> str:
    """A SUCCESS charge of 1999 for alice; its out_trade_no."""
    out_trade_no = ref("P")
    result = provider.charge(
        out_trade_no=out_trade_no,
        amount=1999,
        currency="CNY",
        payer="alice",
        notify_url=NOTIFY_URL,
        idempotency_key=ref("k"),
    )
    assert result.status == ChargeStatus.SUCCESS
    return out_trade_no


@pytest.fixture
def refund(provider: PaymentProvider, paid: str) -> Callable[..., RefundResult]:
    def call(**overrides: Any) -> RefundResult:
        terms = {
            "out_refund_no": ref("R"),
            "out_trade_no": paid,
            "amount": 500,
            "notify_url": NOTIFY_URL,
            "idempotency_key": ref("rk"),
            **overrides,
        }
        return provider.refund(**terms)

    return call


def test_a_refund_and_its_truth(provider, paid, refund):
    result = refund(out_refund_no="R-adapter-1", amount=500)

    assert result.status == RefundStatus.SUCCESS
    assert (result.out_refund_no, result.out_trade_no, result.amount, result.currency) == (
        "R-adapter-1",
        paid,
        500,
        "CNY",
    )
    assert result.refund_id is not None
    assert result.refunded_at is not None
    assert result.decline_reason is None
    assert provider.query_refund(out_refund_no="R-adapter-1") == result
    statement = provider.wallet(payer="alice")
    assert statement is not None
    assert (statement.charged_total, statement.refunded_total) == (1999, 500)
    assert statement.refunds == (result,)


def test_the_same_key_replays_and_the_same_out_refund_no_dedupes(refund):
    first = refund(out_refund_no="R-adapter-2", idempotency_key="rk-2")

    assert refund(out_refund_no="R-adapter-2", idempotency_key="rk-2") == first
    assert refund(out_refund_no="R-adapter-2", idempotency_key="rk-3") == first


def test_a_declined_refund_is_a_result_not_an_exception(refund):
    result = refund(amount=2000)

    assert result.status == RefundStatus.DECLINED
    assert result.decline_reason == "exceeds_refundable"
    assert result.refunded_at is None


def test_a_refund_of_a_charge_the_provider_never_saw_is_rejected(provider, refund):
    with pytest.raises(ProviderRejected) as unknown_charge:
        refund(out_trade_no="P-never-charged")

    assert (unknown_charge.value.status, unknown_charge.value.code) == (404, "charge-not-found")
    assert provider.query_refund(out_refund_no="R-never-made") is None


def test_an_out_refund_no_reused_with_other_terms_is_unknown_and_the_query_tells(provider, refund):
    first = refund(out_refund_no="R-adapter-4", amount=500)

    # A 422: a refund exists under this reference, so "nothing moved" would be a guess.
    with pytest.raises(ProviderOutcomeUnknown):
        refund(out_refund_no="R-adapter-4", amount=501)

    assert provider.query_refund(out_refund_no="R-adapter-4") == first


def test_a_refund_answered_too_late_is_unknown_and_the_query_finds_it(
    provider, paid, fault, settings
):
    settings.PROVIDER_TIMEOUT_S = 0.3
    impatient = get_provider()  # built with the short timeout
    fault("timeout_after_commit", target="refund", delay_s=1)

    with pytest.raises(ProviderOutcomeUnknown):
        impatient.refund(
            out_refund_no="R-adapter-5",
            out_trade_no=paid,
            amount=500,
            notify_url=NOTIFY_URL,
            idempotency_key="rk-5",
        )

    truth = provider.query_refund(out_refund_no="R-adapter-5")
    assert truth is not None
    assert truth.status == RefundStatus.SUCCESS


def test_a_real_refund_notification_verifies_as_a_refund(provider, refund):
    result = refund(out_refund_no="R-adapter-6")
    payload = Notification.objects.get(refund__refund_id=result.refund_id).payload
    raw = encode_body(payload)
    headers = {signing.HEADER: signing.sign(body=raw, secrets=signing.configured_secrets())}

    notice = provider.verify_notification(headers=headers, raw_body=raw)

    assert isinstance(notice, RefundNotification)
    assert (notice.refund_id, notice.out_refund_no, notice.status, notice.amount) == (
        result.refund_id,
        "R-adapter-6",
        RefundStatus.SUCCESS,
        500,
    )
    assert notice.refunded_at == result.refunded_at
    assert json.loads(raw)["event"] == "refund"
