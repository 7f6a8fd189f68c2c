"""Refund notifications and late successes run by a real Celery worker on the real
broker, delivered to a real merchant endpoint on loopback."""

import json

import pytest

from demo.sandbox import signing
from demo.sandbox.models import Charge, Notification
from demo.sandbox.services import DECLINE_PENDING
from tests.demo.sandbox.conftest import CHARGES, REFUNDS, charge_body, refund_body
from tests.workers import unacked_ids

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def enqueued() -> None:
    """Overrides the recorder of conftest.py: here the real worker gets the tasks."""


def received_bodies(receiver) -> list[dict]:
    for headers, body in receiver.received:
        assert signing.verify(
            header=headers.get(signing.HEADER), body=body, secrets=signing.configured_secrets()
        )
    return [json.loads(body) for _, body in receiver.received]


def test_a_refund_notification_is_delivered_signed_by_the_worker(worker, receiver, charge, refund):
    # The charge's own notification is delivered first: a copy left retrying against
    # a dead URL would still be running when the next test flushes the database.
    made = charge(charge_body(amount=1000, notify_url=receiver.url)).json()
    worker.wait_for(lambda: len(receiver.received) == 1, what="the charge notified")
    receiver.answers = [503]  # the merchant fails once: the worker retries

    answer = refund(refund_body(made["out_trade_no"], amount=400, notify_url=receiver.url)).json()

    worker.wait_for(
        lambda: Notification.objects.filter(
            refund__refund_id=answer["refund_id"], status="delivered"
        ).exists(),
        what="the refund notification delivered",
    )
    bodies = received_bodies(receiver)[1:]
    assert len(bodies) == 2  # the failed attempt and the retry, the same bytes
    assert bodies[0] == bodies[1]
    assert bodies[0] == {
        "event": "refund",
        "notify_id": bodies[0]["notify_id"],
        "refund_id": answer["refund_id"],
        "out_refund_no": answer["out_refund_no"],
        "out_trade_no": made["out_trade_no"],
        "status": "SUCCESS",
        "amount": 400,
        "currency": "CNY",
        "refunded_at": answer["refunded_at"],
    }


def test_late_success_end_to_end(worker, receiver, charge, arm, merchant):
    # Given a charge answered DECLINED under late_success
    arm("late_success", delay_s=1)
    body = charge_body(amount=1999, notify_url=receiver.url)
    answer = charge(body, key="late-e2e").json()
    assert (answer["status"], answer["decline_reason"]) == ("DECLINED", DECLINE_PENDING)

    # When the worker runs the late success after the delay
    worker.wait_for(
        lambda: Charge.objects.filter(out_trade_no=body["out_trade_no"], status="SUCCESS").exists(),
        what="the late success",
    )
    worker.wait_for(
        lambda: len(receiver.received) == 2, what="the decline and the success notified"
    )

    # Then the truth is SUCCESS, the merchant heard both, and the key still replays DECLINED
    truth = merchant.get(f"{CHARGES}/{body['out_trade_no']}").json()
    assert truth["status"] == "SUCCESS"
    statuses = sorted(notice["trade_status"] for notice in received_bodies(receiver))
    assert statuses == ["DECLINED", "SUCCESS"]
    wallet = merchant.get("/sandbox/v1/wallets/alice").json()
    assert wallet["charged_total"] == 1999
    replay = charge(body, key="late-e2e")
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json() == answer
    # And the late capture can be given back like any other
    back = merchant.post(
        REFUNDS,
        refund_body(body["out_trade_no"], amount=1999),
        format="json",
        headers={"Idempotency-Key": "late-e2e-refund"},
    )
    assert back.json()["status"] == "SUCCESS"


def test_a_retry_left_behind_is_revoked_before_the_flush(worker, charge):
    # Given a notification retrying, with countdowns, against a merchant that is gone
    made = charge(charge_body(amount=500)).json()
    notification = Notification.objects.get(charge__out_trade_no=made["out_trade_no"])
    worker.wait_for(
        lambda: Notification.objects.get(pk=notification.pk).attempts >= 1, what="a failed POST"
    )

    # When the worker settles, as it does after every test before the database flush
    worker.settle()

    # Then the retry it held was revoked: when its time comes it is dropped, not run
    attempts = Notification.objects.get(pk=notification.pk).attempts
    assert worker.revoked
    worker.wait_for(lambda: not unacked_ids(worker.broker), what="the revoked retry dropped")
    assert Notification.objects.get(pk=notification.pk).attempts == attempts
    assert worker.idle()
