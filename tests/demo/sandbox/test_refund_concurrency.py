"""Sandbox refunds under real concurrency: threads, own connections, real PostgreSQL."""

from collections import Counter

import pytest
from django.conf import settings

from demo.sandbox.models import Charge, IdempotencyRecord, Refund, Wallet
from demo.sandbox.services import DECLINE_EXCEEDS_REFUNDABLE, charge_create, refund_create
from tests.concurrency.helpers import run_at_once
from tests.demo.sandbox.conftest import NOTIFY_URL, charge_body, new_ref

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

START = settings.SANDBOX_WALLET_START


def charged(amount: int) -> str:
    """A SUCCESS charge of ``amount`` for alice; its out_trade_no."""
    body = charge_body(amount=amount)
    assert charge_create(idempotency_key=new_ref(), **body).body["status"] == "SUCCESS"
    return body["out_trade_no"]


def test_ten_partial_refunds_at_once_never_exceed_the_charge():
    out_trade_no = charged(1000)

    answers = run_at_once(
        10,
        lambda index: refund_create(
            idempotency_key=f"rk-{index}",
            out_refund_no=f"R-part-{index}",
            out_trade_no=out_trade_no,
            amount=150,
            notify_url=NOTIFY_URL,
        ),
    )

    statuses = Counter(answer.body["status"] for answer in answers)
    assert statuses == {"SUCCESS": 6, "DECLINED": 4}  # 6 x 150 = 900; a 7th would be 1050
    assert {
        answer.body["decline_reason"] for answer in answers if answer.body["status"] == "DECLINED"
    } == {DECLINE_EXCEEDS_REFUNDABLE}
    assert Charge.objects.get(out_trade_no=out_trade_no).refunded_total == 900
    wallet = Wallet.objects.get(payer="alice")
    assert (wallet.balance, wallet.charged_total, wallet.refunded_total) == (
        START - 1000 + 900,
        1000,
        900,
    )
    assert Refund.objects.filter(status="SUCCESS").count() == 6


def test_identical_refunds_at_once_refund_once():
    out_trade_no = charged(1000)

    answers = run_at_once(
        15,
        lambda _: refund_create(
            idempotency_key="rk-same",
            out_refund_no="R-same",
            out_trade_no=out_trade_no,
            amount=400,
            notify_url=NOTIFY_URL,
        ),
    )

    assert len({answer.body["refund_id"] for answer in answers}) == 1
    assert [answer.replayed for answer in answers].count(False) == 1
    assert Refund.objects.count() == 1
    assert IdempotencyRecord.objects.filter(refund__isnull=False).count() == 1
    assert Wallet.objects.get(payer="alice").refunded_total == 400


def test_one_out_refund_no_under_many_keys_at_once_refunds_once():
    out_trade_no = charged(1000)

    answers = run_at_once(
        15,
        lambda index: refund_create(
            idempotency_key=f"rk-{index}",
            out_refund_no="R-one",
            out_trade_no=out_trade_no,
            amount=1000,
            notify_url=NOTIFY_URL,
        ),
    )

    assert {answer.body["status"] for answer in answers} == {"SUCCESS"}
    assert len({answer.body["refund_id"] for answer in answers}) == 1
    assert Refund.objects.count() == 1
    assert IdempotencyRecord.objects.filter(refund__isnull=False).count() == 15
    wallet = Wallet.objects.get(payer="alice")
    assert (wallet.balance, wallet.refunded_total) == (START, 1000)
