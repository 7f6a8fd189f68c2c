"""Scripted faults: each mode, stacking, counters, and the staff-only endpoint."""

import time

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from demo.sandbox.errors import ProviderError
from demo.sandbox.models import Charge, Fault, IdempotencyRecord, Notification, Wallet
from demo.sandbox.services import DECLINE_SCRIPTED
from tests.conftest import client_for
from tests.demo.sandbox.conftest import FAULTS, charge_body, merchant_client
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

START = settings.SANDBOX_WALLET_START


def balance(payer: str = "alice") -> int:
    return Wallet.objects.get(payer=payer).balance


def remaining(mode: str) -> int:
    return Fault.objects.get(mode=mode).remaining


# --- One mode at a time ---------------------------------------------------------------


def test_decline_declines_the_next_charge_without_a_debit(charge, arm):
    arm("decline")

    declined = charge(charge_body())
    after = charge(charge_body())

    assert declined.status_code == 200
    assert declined.json()["status"] == "DECLINED"
    assert declined.json()["decline_reason"] == DECLINE_SCRIPTED
    assert after.json()["status"] == "SUCCESS"
    assert balance() == START - after.json()["amount"]


def test_error_before_commit_answers_500_and_writes_no_charge(charge, arm):
    arm("error_before_commit")
    body = charge_body()

    response = charge(body, key="k-before")

    assert response.status_code == 500
    assert response.json()["code"] == ProviderError.code
    assert not Charge.objects.exists()
    assert not IdempotencyRecord.objects.exists()
    assert not Notification.objects.exists()
    assert remaining("error_before_commit") == 0  # consumed, so the retry can succeed
    # A retry with the same key runs for real: nothing was stored to replay.
    retry = charge(body, key="k-before")
    assert retry.status_code == 200
    assert retry["Idempotent-Replayed"] == "false"
    assert retry.json()["status"] == "SUCCESS"
    assert balance() == START - body["amount"]


def test_error_after_commit_charges_then_answers_500_and_the_retry_replays(charge, arm):
    arm("error_after_commit")
    body = charge_body()

    response = charge(body, key="k-after")

    assert response.status_code == 500
    assert response.json()["code"] == ProviderError.code
    committed = Charge.objects.get(out_trade_no=body["out_trade_no"])
    assert committed.status == "SUCCESS"
    assert balance() == START - body["amount"]
    # Given the shop retries with the same key, then it learns the true result.
    retry = charge(body, key="k-after")
    assert retry.status_code == 200
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.json()["trade_no"] == committed.trade_no
    assert balance() == START - body["amount"]  # still one debit


def test_timeout_after_commit_answers_late_with_the_committed_charge(charge, arm):
    arm("timeout_after_commit", delay_s=0.3)
    body = charge_body()

    started = time.monotonic()
    response = charge(body)
    elapsed = time.monotonic() - started

    assert elapsed >= 0.3
    assert response.status_code == 200
    assert response.json()["status"] == "SUCCESS"
    assert IdempotencyRecord.objects.filter(charge__out_trade_no=body["out_trade_no"]).exists()


def test_callback_duplicates_stores_copies_sharing_one_notify_id(
    charge, arm, enqueued, django_capture_on_commit_callbacks
):
    arm("callback_duplicates", copies=4)

    with django_capture_on_commit_callbacks(execute=True):
        response = charge(charge_body())

    rows = list(Notification.objects.order_by("copy"))
    assert [row.copy for row in rows] == [1, 2, 3, 4]
    assert len({row.notify_id for row in rows}) == 1
    assert all(row.payload == rows[0].payload for row in rows)
    assert rows[0].payload["trade_no"] == response.json()["trade_no"]
    assert sorted(enqueued.calls) == [(row.pk, 0.0) for row in rows]


def test_callback_shuffle_sends_the_copies_after_random_countdowns(
    charge, arm, enqueued, django_capture_on_commit_callbacks
):
    arm("callback_shuffle", delay_s=2.0)

    with django_capture_on_commit_callbacks(execute=True):
        charge(charge_body())

    rows = list(Notification.objects.all())
    assert len(rows) == 3  # shuffle brings its own copies (default 3)
    assert len({row.notify_id for row in rows}) == 1
    assert all(0 <= row.first_delay_s <= 2.0 for row in rows)
    assert len({row.first_delay_s for row in rows}) == 3  # random, not one shared delay
    assert sorted(enqueued.calls) == sorted((row.pk, row.first_delay_s) for row in rows)


def test_callback_drop_sends_no_notification(
    charge, arm, enqueued, django_capture_on_commit_callbacks
):
    arm("callback_drop")

    with django_capture_on_commit_callbacks(execute=True):
        response = charge(charge_body())

    assert response.json()["status"] == "SUCCESS"
    assert not Notification.objects.exists()
    assert enqueued.calls == []


# --- Stacking and counters ---------------------------------------------------------------


def test_modes_stack_on_one_charge(charge, arm, enqueued, django_capture_on_commit_callbacks):
    arm("timeout_after_commit", delay_s=0.2)
    arm("callback_duplicates", copies=3)
    arm("callback_shuffle", copies=2)

    started = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        response = charge(charge_body())

    assert time.monotonic() - started >= 0.2
    assert response.json()["status"] == "SUCCESS"
    rows = list(Notification.objects.all())
    assert len(rows) == 3  # the larger of the two copy counts
    assert len({row.notify_id for row in rows}) == 1
    assert len({countdown for _, countdown in enqueued.calls}) == 3
    assert not Fault.objects.filter(remaining__gt=0).exists()


def test_error_before_commit_leaves_the_other_modes_for_the_next_real_charge(charge, arm):
    arm("error_before_commit")
    arm("decline")

    failed = charge(charge_body())
    declined = charge(charge_body())

    assert failed.status_code == 500
    assert declined.json()["status"] == "DECLINED"
    assert remaining("decline") == 0


def test_count_applies_to_that_many_charges_then_stops(charge, arm, staff):
    arm("decline", count=2)

    statuses = [charge(charge_body()).json()["status"] for _ in range(3)]

    assert statuses == ["DECLINED", "DECLINED", "SUCCESS"]
    assert staff.get(FAULTS).json() == []


def test_replays_and_dedupes_do_not_consume_faults(charge, arm):
    body = charge_body()
    charge(body, key="k-1")
    arm("decline")

    replay = charge(body, key="k-1")
    dedupe = charge(body, key="k-2")

    assert replay.json()["status"] == "SUCCESS"
    assert dedupe.json()["status"] == "SUCCESS"
    assert remaining("decline") == 1


# --- The staff endpoint ------------------------------------------------------------------


def test_faults_endpoint_lists_arms_and_clears(staff):
    armed = staff.post(FAULTS, {"mode": "timeout_after_commit", "delay_s": 1.5}, format="json")

    assert armed.status_code == 201
    assert armed.json() == [
        {
            "mode": "timeout_after_commit",
            "target": "charge",
            "remaining": 1,
            "delay_s": 1.5,
            "copies": 3,
        }
    ]
    staff.post(FAULTS, {"mode": "decline", "count": 5}, format="json")
    assert [fault["mode"] for fault in staff.get(FAULTS).json()] == [
        "timeout_after_commit",
        "decline",
    ]

    cleared = staff.delete(FAULTS)

    assert cleared.status_code == 204
    assert staff.get(FAULTS).json() == []
    assert not Fault.objects.exists()


def test_arming_a_mode_again_replaces_its_counter(staff):
    staff.post(FAULTS, {"mode": "decline", "count": 5}, format="json")

    staff.post(FAULTS, {"mode": "decline", "count": 2}, format="json")

    assert Fault.objects.get().remaining == 2


@pytest.mark.parametrize(
    "body",
    [
        {"mode": "explode"},
        {},
        {"mode": "decline", "count": 0},
        {"mode": "decline", "count": "2"},
        {"mode": "timeout_after_commit", "delay_s": -1},
        {"mode": "timeout_after_commit", "delay_s": 61},
        {"mode": "callback_duplicates", "copies": 0},
        {"mode": "callback_duplicates", "copies": 11},
    ],
    ids=str,
)
def test_faults_endpoint_refuses_a_bad_body(staff, body):
    response = staff.post(FAULTS, body, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "validation-error"
    assert not Fault.objects.exists()


@pytest.mark.parametrize("method", ["get", "post", "delete"])
def test_faults_endpoint_is_401_without_credentials_and_403_for_non_staff(method):
    anonymous = getattr(APIClient(), method)(FAULTS, {"mode": "decline"}, format="json")
    merchant = getattr(merchant_client(), method)(FAULTS, {"mode": "decline"}, format="json")
    customer = getattr(client_for(UserFactory.create()), method)(
        FAULTS, {"mode": "decline"}, format="json"
    )

    assert anonymous.status_code == 401
    assert merchant.status_code == 401  # the merchant key is not a shop credential
    assert customer.status_code == 403
    assert customer.json()["code"] == "permission-denied"
    assert not Fault.objects.exists()
