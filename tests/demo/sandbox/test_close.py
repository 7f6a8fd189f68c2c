"""Closing an attempt: the fence that makes "the provider has no charge" final."""

import pytest
from django.conf import settings

from demo.sandbox.errors import ChargeAlreadySucceeded
from demo.sandbox.models import Charge, Notification, Wallet
from tests.demo.sandbox.conftest import CHARGES, charge_body

pytestmark = pytest.mark.django_db


def close(client, out_trade_no: str):
    return client.post(f"{CHARGES}/{out_trade_no}/close")


def test_close_before_any_charge_writes_a_closed_fence(merchant):
    response = close(merchant, "P-fence")

    assert response.status_code == 200
    data = response.json()
    assert data["status"] == "CLOSED"
    assert data["out_trade_no"] == "P-fence"
    assert data["trade_no"].startswith("T")
    assert (data["amount"], data["currency"], data["payer"], data["paid_at"]) == (
        None,
        None,
        None,
        None,
    )
    assert merchant.get(f"{CHARGES}/P-fence").json() == data


def test_a_charge_after_the_close_answers_closed_and_moves_no_money(merchant, charge):
    fence = close(merchant, "P-late").json()

    response = charge(charge_body(out_trade_no="P-late"))

    assert response.status_code == 200
    assert response.json() == fence
    assert Charge.objects.get().status == "CLOSED"
    assert not Wallet.objects.exists()  # the late charge never reached a wallet
    assert not Notification.objects.exists()


def test_closing_twice_answers_the_same_fence(merchant):
    first = close(merchant, "P-twice")

    second = close(merchant, "P-twice")

    assert second.status_code == 200
    assert second.json() == first.json()
    assert Charge.objects.count() == 1


def test_closing_a_declined_charge_answers_the_decline(merchant, charge):
    declined = charge(charge_body(amount=settings.SANDBOX_WALLET_START + 1)).json()

    response = close(merchant, declined["out_trade_no"])

    assert response.status_code == 200
    assert response.json() == declined


def test_closing_a_successful_charge_is_409_with_the_charge(merchant, charge):
    paid = charge(charge_body()).json()

    response = close(merchant, paid["out_trade_no"])

    assert response.status_code == 409
    assert response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == ChargeAlreadySucceeded.code
    assert problem["status"] == 409
    assert problem["trade_status"] == "SUCCESS"
    assert problem["trade_no"] == paid["trade_no"]
    assert problem["amount"] == paid["amount"]
    assert problem["charge"] == paid
    assert Charge.objects.get().status == "SUCCESS"
