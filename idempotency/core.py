"""The idempotency core: acquire a key, run its flow once, replay the result.

``execute`` is the entry point the HTTP layer calls. It knows nothing of HTTP:
it finds or creates the (user, key) record, refuses a mismatch (422) or a
request still in flight (409), replays a finished one, and otherwise runs the
flow, whose atomic phases (``idempotency/phases.py``) commit the business rows
and the record together. The completer's way in, the same lock without a
request, is ``idempotency/completer.py``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from edge.throttling import Rate, hit
from idempotency import records
from idempotency.errors import (
    IdempotencyKeyInUse,
    IdempotencyKeyMismatch,
    IdempotencyKeyQuota,
)
from idempotency.models import IdempotencyKey, RecoveryPoint
from idempotency.phases import KeyRaced, LockLost, release
from observability.tracking import lock_taken_over

__all__ = [
    "KeyRequest",
    "Outcome",
    "canonical_json",
    "execute",
    "fingerprint",
    "lock_remaining_s",
    "take_lock",
]


# --- The request as the core sees it ---------------------------------------------


def canonical_json(body: Any) -> str:
    """One spelling per JSON value: sorted keys, no insignificant whitespace."""
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def fingerprint(*, method: str, path: str, body: Any) -> str:
    """SHA-256 over method, route and canonical body.

    Key order and whitespace do not change a request; any value does.
    """
    material = "\n".join([method.upper(), path, canonical_json(body)])
    return hashlib.sha256(material.encode()).hexdigest()


@dataclass(frozen=True)
class KeyRequest:
    user_id: int
    key: str
    method: str
    path: str
    body: Any

    @property
    def fingerprint(self) -> str:
        return fingerprint(method=self.method, path=self.path, body=self.body)


# --- Acquire, run, release -----------------------------------------------------------


def _acquire(request: KeyRequest, fingerprint: str) -> IdempotencyKey:
    """Return the record to replay, or a record locked for this request.

    A new key yields an unsaved record: the first phase inserts it in its own
    transaction, so the key and the business rows appear together or not at all.
    Raises 422 on a fingerprint mismatch and 409 while another request holds it.
    """
    now = timezone.now()
    record = records.store().find(user_id=request.user_id, key=request.key)
    if record is None:
        _count_new_key(user_id=request.user_id)
        return IdempotencyKey(
            user_id=request.user_id,
            key=request.key,
            fingerprint=fingerprint,
            method=request.method,
            path=request.path,
            recovery_point=RecoveryPoint.STARTED,
            lock_token=uuid.uuid4(),
            locked_at=now,
            created_at=now,
        )
    if record.fingerprint != fingerprint:
        raise IdempotencyKeyMismatch()
    if record.is_finished:
        return record

    token = take_lock(record_id=record.pk, now=now)
    if token is None:
        record.refresh_from_db()
        if record.is_finished:  # it finished between our read and our update
            return record
        raise IdempotencyKeyInUse(retry_after=lock_remaining_s(record.locked_at, now=now))
    if record.locked_at is not None:
        # We read it locked and still got it: the lock was stale (or freed a moment
        # ago, which a metric may count as a takeover without harm).
        lock_taken_over()
    record.lock_token, record.locked_at = token, now
    return record


def _count_new_key(*, user_id: int) -> None:
    """Count a record about to be created; refuse it past MAX_KEYS_PER_USER_PER_HOUR.

    Each record is kept IDEMPOTENCY_KEY_TTL (a day): without a cap, one client sending
    a new key per request could store a day of its traffic. An atomic INCR per user and
    clock hour in Redis, before the INSERT: at most the cap of records per hour, even
    under concurrency. A request that counted and then wrote nothing (a race with the
    same key that ends in a replay, a rolled-back phase) used one unit of the quota:
    the cap is on attempts to create, which bounds the records.
    """
    cap = settings.MAX_KEYS_PER_USER_PER_HOUR
    if cap <= 0:
        return
    if (wait := hit(f"idempotency-quota:{user_id}", Rate(limit=cap, period_s=3600))) is not None:
        raise IdempotencyKeyQuota(retry_after=wait)


def lock_remaining_s(locked_at: datetime | None, *, now: datetime) -> float:
    """Seconds until a lock taken at ``locked_at`` is worth asking about again (0 if free).

    A live holder is done within about one provider call (PROVIDER_TIMEOUT_S) of
    taking the lock: until then a retry should soon find its answer. A lock older
    than that most likely belongs to a request that died, and it can be taken over
    only IDEMPOTENCY_LOCK_TIMEOUT after it was taken: a retry sooner is refused again.
    """
    if locked_at is None:
        return 0.0
    age = (now - locked_at).total_seconds()
    if age < settings.PROVIDER_TIMEOUT_S:
        return settings.PROVIDER_TIMEOUT_S - age
    return settings.IDEMPOTENCY_LOCK_TIMEOUT - age


def take_lock(*, record_id: int, now: datetime) -> uuid.UUID | None:
    """Lock an unfinished record if nobody holds it, or if its holder is presumed dead.

    Presumed dead = lock older than IDEMPOTENCY_LOCK_TIMEOUT. One conditional
    UPDATE, so of two retries (or a retry and the completer) racing for an
    abandoned lock exactly one wins. Returns the new token, or None if we lost.
    """
    stale_before = now - timedelta(seconds=settings.IDEMPOTENCY_LOCK_TIMEOUT)
    token = uuid.uuid4()
    taken = (
        IdempotencyKey.objects.filter(pk=record_id)
        .exclude(recovery_point=RecoveryPoint.FINISHED)
        .filter(Q(locked_at__isnull=True) | Q(locked_at__lt=stale_before))
        .update(lock_token=token, locked_at=now)
    )
    return token if taken else None


# --- Entry point -------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """The answer for the client: the stored response, and whether it is a replay.

    ``body_text`` is the stored JSON, sent as is; ``body`` parses it for callers
    that read the answer (the web shop) rather than forward it.
    """

    status: int
    body_text: str
    headers: dict[str, str]
    replayed: bool

    @property
    def body(self) -> Any:
        return json.loads(self.body_text)

    @classmethod
    def of(cls, record: IdempotencyKey, *, replayed: bool) -> Outcome:
        """The finished record's stored answer."""
        assert record.response_status is not None
        return cls(
            status=record.response_status,
            body_text=record.response_body,
            headers=dict(record.response_headers),
            replayed=replayed,
        )


def execute(request: KeyRequest, flow: Callable[[IdempotencyKey], None]) -> Outcome:
    """Run ``flow`` once per (user, key); replay its stored response afterwards."""
    fp = request.fingerprint
    while True:
        record = _acquire(request, fp)
        if record.is_finished:
            return Outcome.of(record, replayed=True)
        try:
            flow(record)
        except KeyRaced:
            continue  # the other request's record is committed now: look again
        except LockLost as error:
            # The retry that took it over holds the lock now: its age says how long.
            locked_at = (
                IdempotencyKey.objects.filter(pk=record.pk)
                .values_list("locked_at", flat=True)
                .first()
            )
            raise IdempotencyKeyInUse(
                "This request was taken over by a retry with the same key.",
                retry_after=lock_remaining_s(locked_at, now=timezone.now()),
            ) from error
        except Exception:
            if record.pk is None and _key_exists(request):
                # A single-phase flow writes its record last: a concurrent duplicate
                # can fail on a business row's unique index (one order per user and
                # key) before reaching its own INSERT. The first one has committed
                # its record by now: look again, and replay it.
                continue
            release(record)
            raise
        except BaseException:
            release(record)
            raise
        if not record.is_finished:
            raise RuntimeError(f"flow returned at recovery point {record.recovery_point!r}")
        return Outcome.of(record, replayed=False)


def _key_exists(request: KeyRequest) -> bool:
    return IdempotencyKey.objects.filter(user_id=request.user_id, key=request.key).exists()
