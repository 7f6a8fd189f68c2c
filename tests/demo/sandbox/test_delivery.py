"""Notification delivery against a real HTTP server on loopback, the retry schedule,
and how a charge hands its notifications to Celery (without touching the broker)."""

import json
import random
import socket
import time

import pytest
from celery import current_app

from demo.sandbox import signing
from demo.sandbox.delivery import (
    BACKOFF_CAP_S,
    MAX_RETRIES,
    backoff_countdown,
    encode_body,
    notification_deliver,
    retry_countdown,
)
from demo.sandbox.models import Notification
from demo.sandbox.services import charge_create, notifications
from demo.sandbox.tasks import deliver_notification
from tests.demo.sandbox.conftest import charge_body

pytestmark = pytest.mark.django_db


def notification_to(url: str) -> Notification:
    """A settled charge whose single notification goes to ``url`` (not enqueued)."""
    body = charge_body(notify_url=url)
    charge_create(idempotency_key=f"k-{body['out_trade_no']}", **body)
    return Notification.objects.get(charge__out_trade_no=body["out_trade_no"])


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- Delivery ----------------------------------------------------------------------------


def test_a_failed_attempt_asks_for_a_retry_and_the_next_one_delivers(receiver):
    receiver.answers = [500]
    notification = notification_to(receiver.url)

    first = notification_deliver(notification_id=notification.pk)

    assert first.status == "pending"
    assert first.status_code == 500
    assert first.attempts == 1
    assert first.retry_in is not None
    assert 0 <= first.retry_in <= 2.0
    notification.refresh_from_db()
    assert (notification.status, notification.attempts, notification.last_status_code) == (
        "pending",
        1,
        500,
    )

    second = notification_deliver(notification_id=notification.pk)

    assert second.status == "delivered"
    assert second.retry_in is None
    notification.refresh_from_db()
    assert (notification.status, notification.attempts, notification.last_status_code) == (
        "delivered",
        2,
        200,
    )
    assert notification.delivered_at is not None


def test_what_the_merchant_receives_is_signed_json(receiver):
    notification = notification_to(receiver.url)

    notification_deliver(notification_id=notification.pk)

    ((headers, raw),) = receiver.received
    assert headers["Content-Type"] == "application/json"
    assert raw == encode_body(notification.payload)
    assert signing.verify(
        header=headers[signing.HEADER], body=raw, secrets=signing.configured_secrets()
    )
    sent = json.loads(raw)
    assert set(sent) == {
        "notify_id",
        "trade_no",
        "out_trade_no",
        "trade_status",
        "amount",
        "currency",
        "paid_at",
    }
    charge = notification.charge
    assert charge is not None
    assert (sent["trade_no"], sent["trade_status"], sent["amount"]) == (
        charge.trade_no,
        "SUCCESS",
        charge.amount,
    )


def test_every_attempt_sends_the_same_bytes_signed_afresh(receiver):
    receiver.answers = [503]
    notification = notification_to(receiver.url)

    notification_deliver(notification_id=notification.pk)
    notification_deliver(notification_id=notification.pk)

    (first_headers, first_body), (second_headers, second_body) = receiver.received
    assert first_body == second_body
    for headers in (first_headers, second_headers):
        assert signing.verify(
            header=headers[signing.HEADER], body=first_body, secrets=signing.configured_secrets()
        )


def test_a_delivered_notification_is_not_posted_again(receiver):
    notification = notification_to(receiver.url)
    notification_deliver(notification_id=notification.pk)

    again = notification_deliver(notification_id=notification.pk)

    assert again.status == "delivered"
    assert again.retry_in is None
    assert len(receiver.received) == 1
    notification.refresh_from_db()
    assert notification.attempts == 1


def test_no_answer_at_all_is_retried_like_an_error():
    notification = notification_to(f"http://127.0.0.1:{closed_port()}/callbacks/")

    result = notification_deliver(notification_id=notification.pk)

    assert result.status == "pending"
    assert result.status_code is None
    assert result.retry_in is not None
    notification.refresh_from_db()
    assert "ConnectionError" in notification.last_error


def test_a_redirect_is_not_an_acknowledgement(receiver):
    receiver.answers = [302]
    notification = notification_to(receiver.url)

    result = notification_deliver(notification_id=notification.pk)

    assert result.status == "pending"
    assert result.status_code == 302
    assert len(receiver.received) == 1  # not followed


def test_delivery_gives_up_after_the_last_retry(receiver):
    receiver.answers = [500, 500]
    notification = notification_to(receiver.url)
    Notification.objects.filter(pk=notification.pk).update(attempts=MAX_RETRIES)

    result = notification_deliver(notification_id=notification.pk)

    assert result.status == "failed"
    assert result.attempts == MAX_RETRIES + 1
    assert result.retry_in is None
    # A redelivered task message changes nothing once the copy has failed.
    assert notification_deliver(notification_id=notification.pk).status == "failed"
    assert len(receiver.received) == 1


# --- The retry schedule ------------------------------------------------------------------


@pytest.mark.parametrize("retry", range(16))
def test_backoff_stays_within_full_jitter_bounds(retry):
    rng = random.Random(retry)
    ceiling = min(BACKOFF_CAP_S, 2.0 * 2**retry)

    samples = [backoff_countdown(retry, rng=rng) for _ in range(200)]

    assert all(0 <= sample <= ceiling for sample in samples)
    assert max(samples) > 0.8 * ceiling  # it uses the whole range: full jitter
    assert min(samples) < 0.2 * ceiling  # ... down to (almost) no wait at all


def test_retry_countdown_allows_max_retries_then_gives_up():
    rng = random.Random(7)
    countdowns = [retry_countdown(attempts=n, rng=rng) for n in range(1, MAX_RETRIES + 2)]

    assert MAX_RETRIES == 12
    assert all(countdown is not None for countdown in countdowns[:MAX_RETRIES])
    assert countdowns[MAX_RETRIES] is None  # the 13th failed attempt is the last


# --- Enqueue: on commit, through Celery ---------------------------------------------------


def test_a_charge_enqueues_its_notification_only_when_it_commits(
    enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        notification = notification_to("http://127.0.0.1:9/")

    assert len(callbacks) == 1
    assert enqueued.calls == []  # nothing was sent while the transaction was open
    callbacks[0]()
    assert enqueued.calls == [(notification.pk, 0.0)]


def test_a_charge_that_rolls_back_enqueues_nothing(arm, charge, django_capture_on_commit_callbacks):
    arm("error_before_commit")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = charge(charge_body())

    assert response.status_code == 500
    assert callbacks == []


def test_the_task_retries_until_the_merchant_acknowledges(receiver):
    receiver.answers = [500, 503]
    notification = notification_to(receiver.url)

    # apply() runs the task in this process, and an eager retry re-runs it at once:
    # the real task code, no broker, no countdown to wait for.
    result = deliver_notification.apply(args=(notification.pk,))

    assert result.get() == "delivered"
    notification.refresh_from_db()
    assert notification.attempts == 3
    assert len(receiver.received) == 3


def test_the_real_enqueue_hands_the_notification_to_the_task(
    receiver, enqueued, monkeypatch, django_capture_on_commit_callbacks
):
    # The real enqueue with Celery in eager mode: apply_async runs the task here
    # instead of publishing to Redis, so the whole path runs without a broker message.
    monkeypatch.setattr(notifications, "notification_enqueue", enqueued.real)
    monkeypatch.setitem(current_app.conf, "task_always_eager", True)

    started = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        notification = notification_to(receiver.url)

    assert time.monotonic() - started < 5
    notification.refresh_from_db()
    assert notification.status == "delivered"
    assert len(receiver.received) == 1
