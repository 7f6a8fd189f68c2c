"""late_success with ``target: refund``: a refund declined now that goes through later
(the task driven directly; the shop's side of it is in tests/reconcile)."""

import pytest
from django.conf import settings
from django.utils import timezone

from demo.sandbox.models import Charge, Notification, Refund, Wallet
from demo.sandbox.services import DECLINE_EXCEEDS_REFUNDABLE, DECLINE_PENDING
from demo.sandbox.services.late_success import refund_late_success_settle
from demo.sandbox.tasks import settle_refund_late_success
from tests.demo.sandbox.conftest import REFUNDS, refund_body

pytestmark = pytest.mark.django_db

START = settings.SANDBOX_WALLET_START


def wallet(payer: str = "alice") -> Wallet:
    return Wallet.objects.get(payer=payer)


@pytest.fixture
def refund_declined_late(paid, refund, arm, enqueued, django_capture_on_commit_callbacks):
    """A refund of a 1999 charge answered DECLINED under late_success: (body, key, answer)."""
    charge = paid()
    arm("late_success", target="refund", delay_s=5)
    body = refund_body(charge["out_trade_no"], amount=1999)
    with django_capture_on_commit_callbacks(execute=True):
        answer = refund(body, key="late-refund").json()
    return body, "late-refund", answer


def test_the_refund_is_answered_declined_now_and_nothing_moves(refund_declined_late, enqueued):
    body, _, answer = refund_declined_late

    assert (answer["status"], answer["decline_reason"]) == ("DECLINED", DECLINE_PENDING)
    row = Refund.objects.get(out_refund_no=body["out_refund_no"])
    assert row.late_success_at is not None
    assert (wallet().balance, wallet().refunded_total) == (START - 1999, 0)
    assert Charge.objects.get(pk=row.charge_id).refunded_total == 0
    [(refund_id, countdown)] = enqueued.refund_late_successes
    assert refund_id == row.pk
    # Counted from the enqueue, after the answer was built: no more than the delay, no
    # less than what is left of it now (a fixed clock: a slow request cannot race it).
    assert (row.late_success_at - timezone.now()).total_seconds() <= countdown <= 5
    assert enqueued.late_successes == []  # the charge's own late success is not armed


def test_later_it_succeeds_credits_and_notifies_success(
    refund_declined_late, refund, merchant, enqueued, django_capture_on_commit_callbacks
):
    body, key, answer = refund_declined_late
    row = Refund.objects.get(out_refund_no=body["out_refund_no"])

    with django_capture_on_commit_callbacks(execute=True):
        settled = refund_late_success_settle(refund_id=row.pk)

    assert settled is not None
    assert (settled.status, settled.decline_reason, settled.late_success_at) == (
        "SUCCESS",
        None,
        None,
    )
    assert settled.refunded_at is not None
    assert (wallet().balance, wallet().refunded_total) == (START, 1999)
    assert Charge.objects.get(pk=row.charge_id).refunded_total == 1999
    truth = merchant.get(f"{REFUNDS}/{body['out_refund_no']}").json()
    assert (truth["status"], truth["amount"]) == ("SUCCESS", 1999)
    success = Notification.objects.get(refund=row, payload__status="SUCCESS")
    assert (success.pk, 0.0) in enqueued.calls
    # The key replays its first answer for ever; the reference dedupes onto the truth.
    replay = refund(body, key=key)
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json() == answer
    assert refund(body).json()["status"] == "SUCCESS"


def test_running_the_task_twice_credits_once(refund_declined_late):
    body, _, _ = refund_declined_late
    refund_id = Refund.objects.get(out_refund_no=body["out_refund_no"]).pk

    first = settle_refund_late_success.apply(args=(refund_id,)).get()
    second = settle_refund_late_success.apply(args=(refund_id,)).get()

    assert (first, second) == ("SUCCESS", "already settled")
    assert wallet().refunded_total == 1999
    assert Notification.objects.filter(payload__status="SUCCESS").count() == 1


def test_when_another_refund_took_the_rest_first_it_stays_declined(refund_declined_late, refund):
    body, _, _ = refund_declined_late
    other = refund(refund_body(body["out_trade_no"], amount=1999)).json()
    assert other["status"] == "SUCCESS"
    row = Refund.objects.get(out_refund_no=body["out_refund_no"])

    settled = refund_late_success_settle(refund_id=row.pk)

    assert settled is not None
    assert (settled.status, settled.decline_reason) == ("DECLINED", DECLINE_EXCEEDS_REFUNDABLE)
    assert wallet().refunded_total == 1999  # the other refund's, once
    assert Charge.objects.get(pk=row.charge_id).refunded_total == 1999
    assert refund_late_success_settle(refund_id=row.pk) is None
