"""late_success: declined now, SUCCESS later (the task driven directly; the worker's
end-to-end run is in test_worker.py)."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from demo.sandbox.models import Charge, Notification, Wallet
from demo.sandbox.services import (
    DECLINE_INSUFFICIENT_FUNDS,
    DECLINE_PENDING,
    late_success,
    late_success_settle,
)
from demo.sandbox.tasks import settle_late_success
from tests.demo.sandbox.conftest import CHARGES, charge_body

pytestmark = pytest.mark.django_db

START = settings.SANDBOX_WALLET_START


def balance(payer: str = "alice") -> int:
    return Wallet.objects.get(payer=payer).balance


@pytest.fixture
def declined_late(charge, arm, enqueued, django_capture_on_commit_callbacks):
    """A charge answered DECLINED under late_success (delay 5 s): (body, key, answer)."""
    arm("late_success", delay_s=5)
    body = charge_body(amount=1999)
    with django_capture_on_commit_callbacks(execute=True):
        answer = charge(body, key="late-key").json()
    return body, "late-key", answer


def test_the_charge_is_answered_declined_now_and_nothing_is_debited(declined_late, enqueued):
    body, _, answer = declined_late

    assert answer["status"] == "DECLINED"
    assert answer["decline_reason"] == DECLINE_PENDING
    assert balance() == START
    row = Charge.objects.get(out_trade_no=body["out_trade_no"])
    assert row.late_success_at is not None
    # One late success enqueued, to run after the fault's delay.
    [(charge_id, countdown)] = enqueued.late_successes
    assert charge_id == row.pk
    # Counted from the enqueue, after the answer was built: no more than the delay, no
    # less than what is left of it now (a fixed clock: a slow request cannot race it).
    assert (row.late_success_at - timezone.now()).total_seconds() <= countdown <= 5
    # The decline is notified like any decline.
    assert Notification.objects.get(charge=row).payload["trade_status"] == "DECLINED"


def test_later_the_charge_succeeds_debits_and_notifies_success(
    declined_late, merchant, django_capture_on_commit_callbacks, enqueued
):
    body, _, _ = declined_late
    row = Charge.objects.get(out_trade_no=body["out_trade_no"])

    with django_capture_on_commit_callbacks(execute=True):
        settled = late_success_settle(charge_id=row.pk)

    assert settled is not None
    assert settled.status == "SUCCESS"
    assert settled.late_success_at is None
    assert balance() == START - 1999
    assert Wallet.objects.get(payer="alice").charged_total == 1999
    truth = merchant.get(f"{CHARGES}/{body['out_trade_no']}").json()
    assert (truth["status"], truth["decline_reason"]) == ("SUCCESS", None)
    assert truth["paid_at"] is not None
    success = Notification.objects.filter(charge=row, payload__trade_status="SUCCESS").get()
    assert success.payload["paid_at"] == truth["paid_at"]
    assert (success.pk, 0.0) in enqueued.calls


def test_the_key_still_replays_declined_and_a_new_key_sees_success(declined_late, charge, merchant):
    body, key, answer = declined_late
    late_success_settle(charge_id=Charge.objects.get(out_trade_no=body["out_trade_no"]).pk)

    replay = charge(body, key=key)
    dedupe = charge(body)

    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json() == answer  # the first answer, for ever
    assert dedupe.json()["status"] == "SUCCESS"  # the truth now


def test_running_the_task_twice_debits_once(declined_late):
    body, _, _ = declined_late
    charge_id = Charge.objects.get(out_trade_no=body["out_trade_no"]).pk

    first = settle_late_success.apply(args=(charge_id,)).get()
    second = settle_late_success.apply(args=(charge_id,)).get()

    assert (first, second) == ("SUCCESS", "already settled")
    assert balance() == START - 1999
    assert Notification.objects.filter(payload__trade_status="SUCCESS").count() == 1


def test_it_succeeds_even_after_the_merchant_closed_the_attempt(declined_late, merchant):
    body, _, _ = declined_late
    closed = merchant.post(f"{CHARGES}/{body['out_trade_no']}/close")
    assert closed.json()["status"] == "DECLINED"  # closing a decline changes nothing

    late_success_settle(charge_id=Charge.objects.get(out_trade_no=body["out_trade_no"]).pk)

    assert merchant.get(f"{CHARGES}/{body['out_trade_no']}").json()["status"] == "SUCCESS"
    assert balance() == START - 1999


def test_without_the_balance_it_stays_declined_for_good(declined_late, charge):
    body, _, _ = declined_late
    charge(charge_body(amount=START - 1000))  # spends all but 1000
    row = Charge.objects.get(out_trade_no=body["out_trade_no"])

    settled = late_success_settle(charge_id=row.pk)

    assert settled is not None
    assert (settled.status, settled.decline_reason) == ("DECLINED", DECLINE_INSUFFICIENT_FUNDS)
    assert settled.late_success_at is None
    assert balance() == 1000
    assert not Notification.objects.filter(charge=row, payload__trade_status="SUCCESS").exists()
    assert late_success_settle(charge_id=row.pk) is None


def test_an_ordinary_decline_is_never_flipped(charge, arm):
    arm("decline")
    declined = charge(charge_body()).json()
    row = Charge.objects.get(out_trade_no=declined["out_trade_no"])

    assert late_success_settle(charge_id=row.pk) is None
    row.refresh_from_db()
    assert row.status == "DECLINED"
    assert balance() == START


def test_late_success_arms_for_charges_and_is_consumed_by_one(charge, arm):
    arm("late_success", delay_s=1)

    first = charge(charge_body()).json()
    second = charge(charge_body()).json()

    assert (first["status"], second["status"]) == ("DECLINED", "SUCCESS")


@pytest.mark.django_db(transaction=True)
def test_a_failed_enqueue_after_commit_still_answers_the_committed_decline(
    charge, arm, monkeypatch
):
    # Given a broker that refuses the late success at commit time
    def refuse(**_: object) -> None:
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(late_success, "late_success_enqueue", refuse)
    arm("late_success", delay_s=1)
    body = charge_body()

    # When the charge commits, then its answer is the committed decline, not a 500
    response = charge(body)

    assert response.status_code == 200
    assert response.json()["status"] == "DECLINED"
    # and the charge simply stays DECLINED, its pending late success visible
    row = Charge.objects.get(out_trade_no=body["out_trade_no"])
    assert (row.status, row.decline_reason) == ("DECLINED", DECLINE_PENDING)
    assert row.late_success_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_sweep_with_one_late_success_the_database_refuses_settles_the_others(
    charge, arm, poison, caplog
):
    from datetime import timedelta

    from demo.sandbox.services.sweeps import sandbox_sweep_run_once

    # Given three charges declined under late_success, their late successes past due
    # (the broker lost them); the middle one's row refuses the settlement
    bodies = []
    for _ in range(3):
        arm("late_success", delay_s=5)
        bodies.append(charge_body(amount=100))
        assert charge(bodies[-1]).json()["status"] == "DECLINED"
    rows = [Charge.objects.get(out_trade_no=body["out_trade_no"]) for body in bodies]
    Charge.objects.update(late_success_at=timezone.now() - timedelta(minutes=10))
    poison("sandbox_charge", f"NEW.id = {rows[1].pk} AND NEW.status <> OLD.status")

    counts = sandbox_sweep_run_once(after_s=0)

    # Then the other two succeeded; the refused one is logged by id and left declined,
    # still due, for the next sweep
    assert (counts.late_charges_settled, counts.failed) == (2, 1)
    statuses = [Charge.objects.get(pk=row.pk).status for row in rows]
    assert statuses == ["SUCCESS", "DECLINED", "SUCCESS"]
    assert Charge.objects.get(pk=rows[1].pk).late_success_at is not None
    assert f"charge {rows[1].pk} failed" in caplog.text
    assert balance() == START - 200


def test_a_scheduled_late_success_counts_as_left_until_it_is_made(declined_late, merchant):
    from io import StringIO

    from django.core.management import call_command

    from demo.sandbox.services.sweeps import sandbox_scheduled_left

    # Given a charge whose late success is scheduled 5 s from now (its message taken by
    # a worker that may be killed before it runs)
    body, _, _ = declined_late
    assert sandbox_scheduled_left() == 1

    # When the sweep runs without its grace before the move is due, it leaves it
    out = StringIO()
    call_command("sandbox_sweep", "--after-s", "0", stdout=out)
    assert "late charges 0" in out.getvalue()
    assert sandbox_scheduled_left() == 1

    # and once it is due, the sweep makes it at once, not two minutes later
    Charge.objects.update(late_success_at=timezone.now() - timedelta(seconds=1))
    out = StringIO()
    call_command("sandbox_sweep", "--after-s", "0", stdout=out)
    assert "late charges 1" in out.getvalue()
    assert Charge.objects.get(out_trade_no=body["out_trade_no"]).status == "SUCCESS"
    assert sandbox_scheduled_left() == 0


@pytest.mark.parametrize("grace", ["-1", "nan", "inf", "1e308", "604801"])
def test_the_sweep_command_refuses_a_grace_it_cannot_count(grace):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="from 0 to 604800"):
        call_command("sandbox_sweep", "--after-s", grace)
