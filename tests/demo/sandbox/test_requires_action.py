"""requires_action: a charge that waits for its customer (3-D Secure), who completes or
abandons it through the sandbox's API with the charge's client_secret; a close fences it."""

from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from demo.sandbox.models import Charge, Fault, Notification, Wallet
from demo.sandbox.services.declines import DECLINE_ABANDONED, DECLINE_INSUFFICIENT_FUNDS
from tests.demo.sandbox.conftest import CHARGES, charge_body

pytestmark = pytest.mark.django_db

START = settings.SANDBOX_WALLET_START


@pytest.fixture
def waiting(charge, arm) -> dict[str, Any]:
    """A charge answered ACTION_REQUIRED: its JSON."""
    arm("requires_action")
    answer = charge(charge_body(amount=1999)).json()
    assert answer["status"] == "ACTION_REQUIRED", answer
    return answer


def act(answer: dict[str, Any], result: str, secret: str | None = None) -> Any:
    # The customer's client: no merchant key, the client_secret instead.
    return APIClient().post(
        answer["next_action"]["url"],
        {"client_secret": secret or answer["client_secret"], "result": result},
        format="json",
    )


def test_the_charge_waits_with_what_the_customer_needs_and_nothing_is_debited(waiting):
    assert waiting["client_secret"]
    assert waiting["next_action"] == {
        "type": "customer_action",
        "url": f"{CHARGES}/{waiting['out_trade_no']}/action",
    }
    assert Wallet.objects.get(payer="alice").balance == START
    # Nothing settled, nothing notified yet.
    assert not Notification.objects.filter(charge__out_trade_no=waiting["out_trade_no"]).exists()


def test_the_customer_completes_it_once(waiting, merchant, enqueued):
    completed = act(waiting, "complete")

    assert completed.status_code == 200
    assert completed.json()["status"] == "SUCCESS"
    assert "client_secret" not in completed.json()  # no longer anyone's to act on
    assert Wallet.objects.get(payer="alice").balance == START - 1999
    truth = merchant.get(f"{CHARGES}/{waiting['out_trade_no']}").json()
    assert truth["status"] == "SUCCESS"
    (notified,) = Notification.objects.filter(charge__out_trade_no=waiting["out_trade_no"])
    assert notified.payload["trade_status"] == "SUCCESS"
    # A second click changes nothing: 409, the charge as it is
    again = act(waiting, "complete")
    assert again.status_code == 409
    assert again.json()["code"] == "charge-not-awaiting-action"
    assert again.json()["charge"]["status"] == "SUCCESS"
    assert Wallet.objects.get(payer="alice").balance == START - 1999


def test_the_customer_abandons_it(waiting):
    abandoned = act(waiting, "abandon")

    assert abandoned.json()["status"] == "DECLINED"
    assert abandoned.json()["decline_reason"] == DECLINE_ABANDONED
    assert Wallet.objects.get(payer="alice").balance == START


def test_completing_it_without_the_funds_declines_it(charge, arm):
    arm("requires_action")
    answer = charge(charge_body(amount=START + 1)).json()

    completed = act(answer, "complete")

    assert completed.json()["decline_reason"] == DECLINE_INSUFFICIENT_FUNDS
    assert Wallet.objects.get(payer="alice").balance == START


def test_a_wrong_client_secret_is_refused_and_changes_nothing(waiting):
    refused = act(waiting, "complete", secret="cs_" + "0" * 32)

    assert refused.status_code == 403
    assert refused.json()["code"] == "client-secret-invalid"
    assert Charge.objects.get(out_trade_no=waiting["out_trade_no"]).status == "ACTION_REQUIRED"


def test_a_close_fences_it_and_the_customer_comes_too_late(waiting, merchant):
    closed = merchant.post(f"{CHARGES}/{waiting['out_trade_no']}/close")

    assert closed.status_code == 200
    assert closed.json()["status"] == "CLOSED"
    late = act(waiting, "complete")
    assert late.status_code == 409
    assert late.json()["charge"]["status"] == "CLOSED"
    assert Wallet.objects.get(payer="alice").balance == START


def test_a_replay_of_the_charge_repeats_its_first_answer(charge, arm, waiting):
    # The provider's idempotency: the same key answers what it answered first, which
    # is why the shop asks (GET) before it charges again an attempt that waited.
    body = {k: waiting[k] for k in ("out_trade_no", "amount", "currency")}
    act(waiting, "complete")

    again = charge(charge_body(**body, payer="alice"))

    # A new key for the same out_trade_no dedupes onto the charge as it is now.
    assert again.json()["status"] == "SUCCESS"


def test_the_wallet_leaves_out_a_charge_still_waiting(waiting, merchant):
    wallet = merchant.get("/sandbox/v1/wallets/alice").json()

    assert wallet["charged_total"] == 0
    (listed,) = wallet["charges"]
    assert listed["status"] == "ACTION_REQUIRED"


def test_the_sandboxs_index_describes_the_fault_and_the_customers_endpoint():
    index = APIClient().get("/sandbox/", HTTP_ACCEPT="application/json").json()

    assert "requires_action" in index["fault_modes"]
    assert set(index["fault_modes"]) == set(Fault.Mode.values)  # every mode, described
    assert any("/action" in endpoint for endpoint in index["endpoints"])
