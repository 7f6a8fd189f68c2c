"""Delivering one notification copy to the merchant, and when to try again.

At least once, never forever: each attempt is counted in the database (so a
redelivered Celery message does not restart the count), a 2xx ends it, and
after MAX_RETRIES failed retries the copy is marked failed. The retry schedule
is a pure function so it can be tested without a clock or a worker.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

import requests
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from demo.sandbox import signing
from demo.sandbox.models import Notification
from observability import context

# Connect fast-fails a dead host; read leaves a slow merchant time to commit its
# side. Well below CELERY_TASK_TIME_LIMIT, so a hung merchant never kills the task.
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 10.0
# Exponential backoff with full jitter (AWS architecture blog): the k-th retry
# waits uniform(0, min(cap, base * 2**k)). Jitter spreads a burst of failures so
# a recovering merchant is not hit by all retries at the same instant.
BACKOFF_BASE_S = 2.0
BACKOFF_CAP_S = 300.0
# 12 retries at up to 2, 4, ..., 300 s span roughly half an hour of outage at most,
# which is what a demo merchant restart needs; the reconciler covers the rest.
MAX_RETRIES = 12
# Jitter needs no secrecy, only independence between notifications.
_JITTER = random.Random()  # noqa: S311


def backoff_countdown(retry: int, *, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number ``retry`` (0-based): full jitter."""
    ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**retry)
    return (rng or _JITTER).uniform(0, ceiling)


def retry_countdown(*, attempts: int, rng: random.Random | None = None) -> float | None:
    """After ``attempts`` failed attempts: seconds until the next one, or None to give up."""
    if attempts > MAX_RETRIES:
        return None
    return backoff_countdown(attempts - 1, rng=rng)


@dataclass(frozen=True)
class DeliveryResult:
    status: str  # Notification.Status after this call
    attempts: int
    status_code: int | None = None
    retry_in: float | None = None  # set: the caller should try again after this many s


def encode_body(payload: dict[str, object]) -> bytes:
    """The exact bytes sent and signed (compact, sorted: identical on every attempt)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def _post(url: str, body: bytes) -> tuple[int | None, str]:
    """POST once. (status code, "") on any HTTP answer; (None, error) without one."""
    headers = {
        "Content-Type": "application/json",
        # Signed per attempt: a retry an hour later must carry a fresh ``t``.
        signing.HEADER: signing.sign(body=body, secrets=signing.configured_secrets()),
        # The charge's request id, carried here through the task's headers.
        **context.outbound_headers(),
    }
    try:
        response = requests.post(
            url,
            data=body,
            headers=headers,
            timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S),
            # A redirect is not an acknowledgement; following one would re-POST
            # the notification somewhere the merchant did not configure.
            allow_redirects=False,
        )
    except requests.RequestException as error:
        return None, f"{type(error).__name__}: {error}"[:500]
    return response.status_code, ""


def notification_deliver(*, notification_id: int) -> DeliveryResult:
    """Make one delivery attempt of one copy, and record what happened.

    Safe to run twice: a copy that is already delivered or failed is left alone.
    Two runs at the same moment may both POST (at-least-once: the merchant
    dedupes on notify_id), but each attempt is counted once.
    """
    with transaction.atomic():
        # Counted before the POST and committed, so even a worker killed mid-request
        # has used up an attempt: a poison notification cannot loop forever.
        claimed = Notification.objects.filter(
            pk=notification_id, status=Notification.Status.PENDING
        ).update(attempts=F("attempts") + 1)
        notification = Notification.objects.select_related("charge", "refund").get(
            pk=notification_id
        )
    if not claimed:
        return DeliveryResult(status=notification.status, attempts=notification.attempts)

    url = notification.notify_url
    code, error = _post(url, encode_body(notification.payload))
    if code is not None and 200 <= code < 300:
        status, retry_in = Notification.Status.DELIVERED, None
    else:
        retry_in = retry_countdown(attempts=notification.attempts)
        status = Notification.Status.PENDING if retry_in is not None else Notification.Status.FAILED
    # Conditional on PENDING: a concurrent run that already delivered stays delivered.
    Notification.objects.filter(pk=notification_id, status=Notification.Status.PENDING).update(
        status=status,
        last_status_code=code,
        last_error=error,
        delivered_at=timezone.now() if status == Notification.Status.DELIVERED else None,
    )
    return DeliveryResult(
        status=status, attempts=notification.attempts, status_code=code, retry_in=retry_in
    )
