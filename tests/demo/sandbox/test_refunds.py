"""Sandbox refunds over its merchant API: money back once, replays, dedupe, limits."""

import re

import pytest
from django.conf import settings

from demo.sandbox.errors import (
    ChargeNotFound,
    IdempotencyKeyMismatch,
    IdempotencyKeyMissing,
    MerchantUnauthorized,
    OutRefundNoMismatch,
    RefundNotFound,
)
from demo.sandbox.models import Charge, IdempotencyRecord, Notification, Refund, Wallet
from demo.sandbox.services import (
    DECLINE_CHARGE_NOT_REFUNDABLE,
    DECLINE_EXCEEDS_REFUNDABLE,
    DECLINE_INSUFFICIENT_FUNDS,
)
from tests.demo.sandbox.conftest import CHARGES, REFUNDS, charge_body, merchant_client, refund_body

pytestmark = pytest.mark.django_db

START = settings.SANDBOX_WALLET_START
REFUND_FIELDS = {
    "refund_id",
    "out_refund_no",
    "out_trade_no",
    "status",
    "amount",
    "currency",
    "refunded_at",
    "decline_reason",
    "reversed_at",  # set once a refund that went through failed (refund_reversal)
}


def wallet(payer: str = "alice") -> Wallet:
    return Wallet.objects.get(payer=payer)


# --- Happy path ----------------------------------------------------------------------


def test_a_refund_credits_the_wallet_once_and_is_the_truth_afterwards(paid, refund, merchant):
    charge = paid(amount=1999)
    body = refund_body(charge["out_trade_no"], amount=500)

    response = refund(body)

    assert response.status_code == 200
    assert response["Idempotent-Replayed"] == "false"
    data = response.json()
    assert set(data) == REFUND_FIELDS
    assert re.fullmatch(r"R[0-9A-F]{20}", data["refund_id"])
    assert (data["status"], data["amount"], data["currency"], data["decline_reason"]) == (
        "SUCCESS",
        500,
        "CNY",
        None,
    )
    assert (data["out_refund_no"], data["out_trade_no"]) == (
        body["out_refund_no"],
        charge["out_trade_no"],
    )
    assert data["refunded_at"] is not None
    assert (wallet().balance, wallet().charged_total, wallet().refunded_total) == (
        START - 1999 + 500,
        1999,
        500,
    )
    assert Charge.objects.get(out_trade_no=charge["out_trade_no"]).refunded_total == 500
    # GET is the truth, in the same shape.
    truth = merchant.get(f"{REFUNDS}/{body['out_refund_no']}")
    assert truth.status_code == 200
    assert truth.json() == data


def test_partial_refunds_add_up_to_the_charge_and_not_a_unit_more(paid, refund):
    charge = paid(amount=1000)

    first = refund(refund_body(charge["out_trade_no"], amount=600)).json()
    second = refund(refund_body(charge["out_trade_no"], amount=400)).json()
    third = refund(refund_body(charge["out_trade_no"], amount=1)).json()

    assert (first["status"], second["status"]) == ("SUCCESS", "SUCCESS")
    assert third["status"] == "DECLINED"
    assert third["decline_reason"] == DECLINE_EXCEEDS_REFUNDABLE
    assert third["refunded_at"] is None
    assert Charge.objects.get(out_trade_no=charge["out_trade_no"]).refunded_total == 1000
    assert (wallet().balance, wallet().refunded_total) == (START, 1000)


def test_a_refund_above_the_charge_is_declined_and_moves_nothing(paid, refund):
    charge = paid(amount=1000)

    response = refund(refund_body(charge["out_trade_no"], amount=1001))

    assert response.status_code == 200
    assert response.json()["status"] == "DECLINED"
    assert response.json()["decline_reason"] == DECLINE_EXCEEDS_REFUNDABLE
    assert (wallet().balance, wallet().refunded_total) == (START - 1000, 0)
    assert Refund.objects.get().status == "DECLINED"  # stored, so it dedupes too


def test_the_wallet_lists_refunded_total_and_its_refunds(paid, refund, merchant):
    charge = paid(amount=1000)
    done = refund(refund_body(charge["out_trade_no"], amount=300)).json()

    data = merchant.get("/sandbox/v1/wallets/alice").json()

    assert (data["balance"], data["charged_total"], data["refunded_total"]) == (
        START - 700,
        1000,
        300,
    )
    assert data["refunds"] == [done]


def test_a_settled_refund_schedules_its_notification_with_event_refund(paid, refund):
    charge = paid()

    data = refund(refund_body(charge["out_trade_no"])).json()

    notification = Notification.objects.get(refund__refund_id=data["refund_id"])
    assert notification.charge is None
    assert notification.payload == {
        "event": "refund",
        "notify_id": notification.notify_id,
        **{name: data[name] for name in REFUND_FIELDS - {"decline_reason", "reversed_at"}},
    }


# --- Replays and dedupe --------------------------------------------------------------


def test_same_key_same_body_replays_without_a_second_refund(paid, refund):
    charge = paid()
    body = refund_body(charge["out_trade_no"])
    first = refund(body, key="rk-1")

    again = refund(body, key="rk-1")

    assert again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Refund.objects.count() == 1
    assert wallet().refunded_total == body["amount"]


def test_a_new_key_for_the_same_out_refund_no_answers_that_refund(paid, refund):
    charge = paid()
    body = refund_body(charge["out_trade_no"])
    first = refund(body, key="rk-a")

    dedupe = refund(body, key="rk-b")

    assert dedupe.status_code == 200
    assert dedupe["Idempotent-Replayed"] == "false"
    assert dedupe.json() == first.json()
    assert Refund.objects.count() == 1
    assert wallet().refunded_total == body["amount"]
    assert IdempotencyRecord.objects.filter(refund__isnull=False).count() == 2


def test_same_key_with_other_terms_is_422_and_never_a_second_refund(paid, refund):
    charge = paid()
    body = refund_body(charge["out_trade_no"])
    refund(body, key="rk-x")

    response = refund({**body, "amount": body["amount"] + 1}, key="rk-x")

    assert response.status_code == 422
    assert response.json()["code"] == IdempotencyKeyMismatch.code
    assert Refund.objects.count() == 1


@pytest.mark.parametrize("change", ["amount", "out_trade_no"])
def test_same_out_refund_no_with_other_terms_is_422_never_merged(paid, refund, change):
    charge, other = paid(), paid()
    body = refund_body(charge["out_trade_no"])
    refund(body)
    changed = {"amount": body["amount"] + 1, "out_trade_no": other["out_trade_no"]}[change]

    response = refund({**body, change: changed})

    assert response.status_code == 422
    assert response.json()["code"] == OutRefundNoMismatch.code
    assert Refund.objects.count() == 1
    assert wallet().refunded_total == body["amount"]


def test_a_charge_key_reused_for_a_refund_is_422(charge, refund):
    made = charge(charge_body(), key="shared-key").json()

    response = refund(refund_body(made["out_trade_no"]), key="shared-key")

    assert response.status_code == 422
    assert response.json()["code"] == IdempotencyKeyMismatch.code
    assert not Refund.objects.exists()


# --- What cannot be refunded ---------------------------------------------------------


def test_a_declined_charge_cannot_be_refunded(charge, refund):
    declined = charge(charge_body(amount=START + 1)).json()
    assert declined["decline_reason"] == DECLINE_INSUFFICIENT_FUNDS

    response = refund(refund_body(declined["out_trade_no"], amount=1))

    assert response.status_code == 200
    assert response.json()["status"] == "DECLINED"
    assert response.json()["decline_reason"] == DECLINE_CHARGE_NOT_REFUNDABLE
    assert response.json()["currency"] == "CNY"
    assert (wallet().balance, wallet().refunded_total) == (START, 0)


def test_a_closed_fence_cannot_be_refunded(merchant, refund):
    merchant.post(f"{CHARGES}/P-fenced/close")

    response = refund(refund_body("P-fenced", amount=1))

    assert response.status_code == 200
    assert response.json()["status"] == "DECLINED"
    assert response.json()["decline_reason"] == DECLINE_CHARGE_NOT_REFUNDABLE
    assert response.json()["currency"] is None  # the fence never had terms
    assert not Wallet.objects.exists()


def test_an_unknown_out_trade_no_is_404_and_stores_nothing(refund):
    body = refund_body("P-never-seen")

    response = refund(body, key="rk-unknown")

    assert response.status_code == 404
    assert response.json()["code"] == ChargeNotFound.code
    assert not Refund.objects.exists()
    assert not IdempotencyRecord.objects.exists()


def test_an_unknown_refund_is_404(merchant):
    response = merchant.get(f"{REFUNDS}/R-nothing")

    assert response.status_code == 404
    assert response.json()["code"] == RefundNotFound.code


# --- Bad requests --------------------------------------------------------------------


def test_a_refund_without_an_idempotency_key_is_400(paid, merchant):
    charge = paid()

    response = merchant.post(REFUNDS, refund_body(charge["out_trade_no"]), format="json")

    assert response.status_code == 400
    assert response.json()["code"] == IdempotencyKeyMissing.code
    assert not Refund.objects.exists()


@pytest.mark.parametrize(
    "change",
    [
        {"amount": 0},
        {"amount": "500"},
        {"amount": 5.0},
        {"amount": True},
        {"out_refund_no": ""},
        {"out_refund_no": "x" * 65},
        {"notify_url": "not a url"},
        {"notify_url": "http://169.254.169.254/latest/meta-data/"},  # off the allow-list
    ],
    ids=str,
)
def test_a_bad_refund_body_is_400_and_stores_nothing(paid, refund, change):
    charge = paid()

    response = refund({**refund_body(charge["out_trade_no"]), **change})

    assert response.status_code == 400
    assert response.json()["code"] == "validation-error"
    assert not Refund.objects.exists()


def test_refunds_need_the_merchant_key(paid):
    charge = paid()

    response = merchant_client("not-a-key").post(
        REFUNDS,
        refund_body(charge["out_trade_no"]),
        format="json",
        headers={"Idempotency-Key": "k"},
    )

    assert response.status_code == 401
    assert response.json()["code"] == MerchantUnauthorized.code
    assert not Refund.objects.exists()
