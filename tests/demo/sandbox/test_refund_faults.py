"""Faults aimed at refunds (``target: refund``): each mode, and who consumes what."""

import time

import pytest
from django.conf import settings

from demo.sandbox.errors import ProviderError
from demo.sandbox.models import Fault, IdempotencyRecord, Notification, Refund, Wallet
from demo.sandbox.services import DECLINE_SCRIPTED
from tests.demo.sandbox.conftest import FAULTS, charge_body, refund_body

pytestmark = pytest.mark.django_db

START = settings.SANDBOX_WALLET_START


def refunded_total(payer: str = "alice") -> int:
    return Wallet.objects.get(payer=payer).refunded_total


def remaining(mode: str, target: str = "refund") -> int:
    return Fault.objects.get(mode=mode, target=target).remaining


def test_decline_declines_the_next_refund_and_moves_nothing(paid, refund, arm):
    charge = paid()
    arm("decline", target="refund")

    declined = refund(refund_body(charge["out_trade_no"]))
    after = refund(refund_body(charge["out_trade_no"]))

    assert declined.json()["status"] == "DECLINED"
    assert declined.json()["decline_reason"] == DECLINE_SCRIPTED
    assert after.json()["status"] == "SUCCESS"
    assert refunded_total() == after.json()["amount"]


def test_error_before_commit_answers_500_and_writes_no_refund(paid, refund, arm):
    charge = paid()
    arm("error_before_commit", target="refund")
    body = refund_body(charge["out_trade_no"])

    response = refund(body, key="rk-before")

    assert response.status_code == 500
    assert response.json()["code"] == ProviderError.code
    assert not Refund.objects.exists()
    assert not IdempotencyRecord.objects.filter(refund__isnull=False).exists()
    assert not Notification.objects.filter(refund__isnull=False).exists()
    assert refunded_total() == 0
    # The same key then runs for real: nothing was stored to replay.
    retry = refund(body, key="rk-before")
    assert retry.status_code == 200
    assert retry["Idempotent-Replayed"] == "false"
    assert retry.json()["status"] == "SUCCESS"
    assert refunded_total() == body["amount"]


def test_error_after_commit_refunds_then_answers_500_and_the_retry_replays(paid, refund, arm):
    charge = paid()
    arm("error_after_commit", target="refund")
    body = refund_body(charge["out_trade_no"])

    response = refund(body, key="rk-after")

    assert response.status_code == 500
    committed = Refund.objects.get(out_refund_no=body["out_refund_no"])
    assert committed.status == "SUCCESS"
    assert refunded_total() == body["amount"]
    retry = refund(body, key="rk-after")
    assert retry.status_code == 200
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.json()["refund_id"] == committed.refund_id
    assert refunded_total() == body["amount"]  # still one credit


def test_timeout_after_commit_answers_late_and_the_same_key_replays_the_refund(paid, refund, arm):
    charge = paid()
    arm("timeout_after_commit", target="refund", delay_s=0.3)
    body = refund_body(charge["out_trade_no"])

    started = time.monotonic()
    late = refund(body, key="rk-late")
    elapsed = time.monotonic() - started
    retry = refund(body, key="rk-late")

    assert elapsed >= 0.3
    assert late.json()["status"] == "SUCCESS"
    # The merchant gave up waiting; its retry with the same key finds the refund.
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.json() == late.json()
    assert Refund.objects.count() == 1
    assert refunded_total() == body["amount"]


@pytest.mark.parametrize(
    ("mode", "copies"),
    [("callback_duplicates", 3), ("callback_shuffle", 3), ("callback_drop", 0)],
)
def test_callback_faults_shape_the_refund_notifications(
    paid, refund, arm, enqueued, django_capture_on_commit_callbacks, mode, copies
):
    charge = paid()
    arm(mode, target="refund")

    with django_capture_on_commit_callbacks(execute=True):
        data = refund(refund_body(charge["out_trade_no"])).json()

    rows = list(Notification.objects.filter(refund__refund_id=data["refund_id"]))
    assert len(rows) == copies
    assert len({row.notify_id for row in rows}) <= 1
    # Only the refund's copies were enqueued (the charge's commit hooks never ran).
    assert sorted(enqueued.calls) == sorted((row.pk, row.first_delay_s) for row in rows)
    if mode == "callback_shuffle":
        assert len({row.first_delay_s for row in rows}) == copies


def test_a_refund_fault_is_consumed_by_a_refund_only_and_a_charge_fault_by_a_charge_only(
    charge, refund, arm
):
    arm("decline", target="refund")
    made = charge(charge_body()).json()  # a new charge does not take the refund fault
    assert made["status"] == "SUCCESS"
    assert remaining("decline") == 1
    arm("decline")  # target charge (the default)

    declined = refund(refund_body(made["out_trade_no"])).json()

    assert declined["decline_reason"] == DECLINE_SCRIPTED
    assert remaining("decline", "refund") == 0
    assert remaining("decline", "charge") == 1  # the refund left it for the next charge
    assert charge(charge_body()).json()["status"] == "DECLINED"


def test_replays_and_dedupes_of_refunds_consume_no_fault(paid, refund, arm):
    charge = paid()
    body = refund_body(charge["out_trade_no"])
    refund(body, key="rk-1")
    arm("decline", target="refund")

    assert refund(body, key="rk-1").json()["status"] == "SUCCESS"
    assert refund(body, key="rk-2").json()["status"] == "SUCCESS"
    assert remaining("decline") == 1


def test_a_refund_of_an_unknown_charge_consumes_no_fault(refund, arm):
    arm("decline", target="refund")

    assert refund(refund_body("P-unknown")).status_code == 404
    assert remaining("decline") == 1


def test_the_same_mode_is_armed_per_target(staff):
    staff.post(FAULTS, {"mode": "decline", "count": 2}, format="json")
    response = staff.post(FAULTS, {"mode": "decline", "target": "refund"}, format="json")

    assert [(f["mode"], f["target"], f["remaining"]) for f in response.json()] == [
        ("decline", "charge", 2),
        ("decline", "refund", 1),
    ]


@pytest.mark.parametrize(
    "body",
    [{"mode": "decline", "target": "payout"}, {"mode": "late_success", "target": ""}],
    ids=str,
)
def test_faults_endpoint_refuses_a_bad_target(staff, body):
    response = staff.post(FAULTS, body, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "validation-error"
    assert not Fault.objects.exists()
