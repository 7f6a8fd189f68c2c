"""The idempotency core: acquire a key, run a flow in atomic phases, replay the result.

A *flow* is the business action behind one unsafe endpoint, written as a loop
over recovery points (see ``orders/flows.py`` for the single-phase order
creation and ``payments/flows.py`` for the multi-phase payment)::

    while True:
        match record.recovery_point:
            case RecoveryPoint.STARTED:
                atomic_phase(record, lambda: ...)   # -> MoveTo(...) or Respond(...)
            case RecoveryPoint.FINISHED:
                return
            case other:
                raise UnknownRecoveryPoint(other)

Each ``atomic_phase`` runs its function and writes the phase's result to the
record **in the same database transaction**: either both the business rows
and the new recovery point are committed, or neither is. A crash between
phases leaves the record at the last committed point, and a retry with the
same key (or the completer) resumes from there.

``execute`` is the entry point the HTTP layer calls. It knows nothing of HTTP.
``acquire_abandoned`` and ``resume`` are the completer's way in (reconcile/):
the same lock and the same flow as a client retry, without a request.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from edge.errors import ApplicationError
from edge.ratelimit import Rate, hit
from idempotency.errors import (
    IdempotencyKeyInUse,
    IdempotencyKeyMismatch,
    IdempotencyKeyQuota,
    UnknownRecoveryPoint,
)
from idempotency.models import IdempotencyKey, RecoveryPoint
from idempotency.sql import FinalAnswer, record_find, record_insert, records_finish
from observability.tracking import lock_taken_over

__all__ = [
    "KeyRequest",
    "MoveTo",
    "NoOp",
    "RecoveryPoint",
    "Respond",
    "acquire_abandoned",
    "atomic_phase",
    "canonical_json",
    "execute",
    "fingerprint",
    "finish_abandoned",
    "release",
    "resume",
    "single_phase",
]


# --- What a phase returns ----------------------------------------------------------


@dataclass(frozen=True)
class NoOp:
    """The phase changed nothing the record needs to know about."""


@dataclass(frozen=True)
class MoveTo:
    """The phase committed its work; the flow continues from ``recovery_point``.

    ``resource_*`` names what the phase made (the payment attempt), so the next
    phase, a retry or the completer can find it from the record alone.
    """

    recovery_point: str
    resource_type: str = ""
    resource_id: int | None = None


@dataclass(frozen=True)
class Respond:
    """The flow is done: this is the answer, stored and replayed to every retry."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    resource_type: str = ""
    resource_id: int | None = None

    @classmethod
    def from_error(cls, error: ApplicationError) -> Respond:
        return cls(status=error.status, body=error.to_problem(), headers=dict(error.headers))


PhaseResult = NoOp | MoveTo | Respond


# --- The request as the core sees it ---------------------------------------------


def canonical_json(body: Any) -> str:
    """One spelling per JSON value: sorted keys, no insignificant whitespace."""
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def answer_json(body: Any) -> str:
    """The stored answer's text: encoded once, and sent as is to the first request
    and to every replay (the same bytes). Compact, as DRF renders JSON."""
    return json.dumps(
        body, cls=DjangoJSONEncoder, separators=(",", ":"), ensure_ascii=False, allow_nan=False
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


class _KeyRaced(Exception):
    """Another request inserted the same (user, key) between our lookup and our insert."""


class _LockLost(Exception):
    """Our lock token no longer matches: the record was taken over as abandoned."""


# --- Acquire, run, release -----------------------------------------------------------


def _acquire(request: KeyRequest, fingerprint: str) -> IdempotencyKey:
    """Return the record to replay, or a record locked for this request.

    A new key yields an unsaved record: the first phase inserts it in its own
    transaction, so the key and the business rows appear together or not at all.
    Raises 422 on a fingerprint mismatch and 409 while another request holds it.
    """
    now = timezone.now()
    record = record_find(user_id=request.user_id, key=request.key)
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

    token = _take_lock(record_id=record.pk, now=now)
    if token is None:
        record.refresh_from_db()
        if record.is_finished:  # it finished between our read and our update
            return record
        raise IdempotencyKeyInUse(retry_after=_lock_remaining_s(record.locked_at, now=now))
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


def _lock_remaining_s(locked_at: datetime | None, *, now: datetime) -> float:
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


def _take_lock(*, record_id: int, now: datetime) -> uuid.UUID | None:
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


def _release(record: IdempotencyKey) -> None:
    """Give the lock back after a failed phase; the recovery point stays as committed."""
    if record.ephemeral or record._state.adding:
        return  # never committed: the rollback left nothing behind
    IdempotencyKey.objects.filter(pk=record.pk, lock_token=record.lock_token).update(
        lock_token=None, locked_at=None
    )


def _apply(record: IdempotencyKey, result: PhaseResult) -> dict[str, Any]:
    """Copy a phase result onto the record; return the changed fields."""
    now = timezone.now()
    changes: dict[str, Any]
    match result:
        case NoOp():
            return {}
        case MoveTo(recovery_point=point):
            # Refresh locked_at: a long multi-phase flow is alive, not abandoned.
            changes = {"recovery_point": point, "locked_at": now}
            if result.resource_id is not None:
                changes |= {
                    "resource_type": result.resource_type,
                    "resource_id": result.resource_id,
                }
        case Respond():
            changes = {
                "recovery_point": RecoveryPoint.FINISHED,
                "response_status": result.status,
                "response_body": answer_json(result.body),
                "response_headers": result.headers,
                "resource_type": result.resource_type,
                "resource_id": result.resource_id,
                "finished_at": now,
                "lock_token": None,
                "locked_at": None,
            }
    for name, value in changes.items():
        setattr(record, name, value)
    return changes


def atomic_phase(
    record: IdempotencyKey, work: Callable[[], PhaseResult], *, insert_first: bool = True
) -> None:
    """Run ``work`` and record its result in one transaction.

    A final ``ApplicationError`` (out of stock, declined, not payable) becomes the
    stored response: the phase's transaction rolls back whole (its partial
    business writes with it), and a second transaction stores the error as the
    answer, so a retry gets the same 4xx. Anything else propagates, the
    transaction rolls back, and the record stays where it was. (One transaction
    with a savepoint around ``work`` would do the same, at the price of two more
    round trips on every successful phase: errors are the rare case.)

    A new record is inserted before ``work`` runs (``insert_first``), so a phase
    that moves to a recovery point commits the record with it. A flow whose one
    phase always ends in a final answer (``single_phase``) passes False: the
    record is inserted after the work, finished, in one statement with its
    answer. Either way the unique (user, key) index makes a concurrent duplicate
    fail its INSERT once the first commits, which rolls its whole phase back.
    """
    adding = record._state.adding
    try:
        _phase(record, work, insert_first=insert_first)
    except ApplicationError as error:
        if not error.final:
            raise
        answer = Respond.from_error(error)
        if adding:  # the rolled-back INSERT (insert_first) left the record unsaved
            record._state.adding, record.pk = True, None
        _phase(record, lambda: answer, insert_first=insert_first)


def _phase(record: IdempotencyKey, work: Callable[[], PhaseResult], *, insert_first: bool) -> None:
    with transaction.atomic():
        if insert_first and record._state.adding and not record.ephemeral:
            _insert(record)
        result = work()
        held_token = record.lock_token  # `_apply` clears it on a final response
        changes = _apply(record, result)
        if record.ephemeral or not changes:
            return
        if record._state.adding:
            _insert(record)  # one statement: the record with its answer
            return
        # Fenced on our lock token: if a retry took the record over because we
        # looked dead, this matches no row and the whole phase rolls back.
        fenced = IdempotencyKey.objects.filter(pk=record.pk, lock_token=held_token)
        if not fenced.update(**changes):
            raise _LockLost


def _insert(record: IdempotencyKey) -> None:
    try:
        record_insert(record)
    except IntegrityError as error:
        # A concurrent request with the same key committed first (our INSERT waited
        # on its unique index entry). Start over: we will replay it. Raised inside
        # the phase's transaction, so everything the phase wrote rolls back with it.
        raise _KeyRaced from error


def single_phase(record: IdempotencyKey, work: Callable[[], PhaseResult]) -> None:
    """The whole flow of a single-phase action: STARTED -> ``work`` -> FINISHED.

    ``work`` must end the flow (``Respond``, or a final error): the record is
    written once, finished, after it (see ``atomic_phase``).
    """
    while True:
        match record.recovery_point:
            case RecoveryPoint.STARTED:
                atomic_phase(record, work, insert_first=False)
            case RecoveryPoint.FINISHED:
                return
            case other:
                raise UnknownRecoveryPoint(other)


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


def execute(request: KeyRequest, flow: Callable[[IdempotencyKey], None]) -> Outcome:
    """Run ``flow`` once per (user, key); replay its stored response afterwards."""
    fp = request.fingerprint
    while True:
        if settings.IDEMPOTENCY_ENABLED:
            record = _acquire(request, fp)
        else:
            record = IdempotencyKey(user_id=request.user_id, key=request.key, fingerprint=fp)
            record.ephemeral = True
        if record.is_finished:
            return _outcome(record, replayed=True)
        try:
            flow(record)
        except _KeyRaced:
            continue  # the other request's record is committed now: look again
        except _LockLost as error:
            # The retry that took it over holds the lock now: its age says how long.
            locked_at = (
                IdempotencyKey.objects.filter(pk=record.pk)
                .values_list("locked_at", flat=True)
                .first()
            )
            raise IdempotencyKeyInUse(
                "This request was taken over by a retry with the same key.",
                retry_after=_lock_remaining_s(locked_at, now=timezone.now()),
            ) from error
        except Exception:
            if record._state.adding and not record.ephemeral and _key_exists(request):
                # A single-phase flow writes its record last: a concurrent duplicate
                # can fail on a business row's unique index (one order per user and
                # key) before reaching its own INSERT. The first one has committed
                # its record by now: look again, and replay it.
                continue
            _release(record)
            raise
        except BaseException:
            _release(record)
            raise
        if not record.is_finished:
            raise RuntimeError(f"flow returned at recovery point {record.recovery_point!r}")
        return _outcome(record, replayed=False)


def _key_exists(request: KeyRequest) -> bool:
    return IdempotencyKey.objects.filter(user_id=request.user_id, key=request.key).exists()


# --- Entry points for background work (the completer) ------------------------------


def acquire_abandoned(*, record_id: int) -> IdempotencyKey | None:
    """Lock an unfinished record that no live request holds, for the completer.

    The same conditional UPDATE as a client retry takes (``_take_lock``): the
    lock must be free or older than IDEMPOTENCY_LOCK_TIMEOUT, and of everyone
    racing for it exactly one wins. None when the record is finished, gone, or
    held by a request that is still alive: the caller leaves it alone.

    The returned record carries the new token, so every phase the caller runs
    through ``resume`` commits only while it still holds the lock.
    """
    token = _take_lock(record_id=record_id, now=timezone.now())
    if token is None:
        return None
    # Read after locking: no phase of anyone else can commit from now on (each is
    # fenced on its own token), so what we read is where the request stands.
    return IdempotencyKey.objects.filter(pk=record_id, lock_token=token).first()


def resume(record: IdempotencyKey, flow: Callable[[IdempotencyKey], None]) -> None:
    """Run ``flow`` on a record taken with ``acquire_abandoned``, as a retry would.

    Exactly ``execute``'s handling, minus the HTTP-facing parts: if the flow
    raises, the lock is released (the recovery point stays as committed) and the
    exception propagates; if a client retry took the record over meanwhile,
    ``IdempotencyKeyInUse``. On return the record is finished.
    """
    try:
        flow(record)
    except _LockLost as error:
        raise IdempotencyKeyInUse("The record was taken over by a retry.") from error
    except BaseException:
        _release(record)
        raise
    if not record.is_finished:
        _release(record)
        raise RuntimeError(f"flow returned at recovery point {record.recovery_point!r}")


def finish_abandoned(answers: Mapping[int, Respond], *, recovery_point: str) -> set[int]:
    """Store final answers in many abandoned records at once: the completer's batch way.

    ``answers``: record id -> the ``Respond`` its flow would end with from
    ``recovery_point``. A record is finished only if it is still there, names the
    answer's resource, and no live request holds it (free, or older than
    IDEMPOTENCY_LOCK_TIMEOUT: the condition of ``acquire_abandoned``). Then it gets
    exactly what a flow's final phase writes (``_apply``), in one statement for the
    whole batch. Returns the ids finished; the others are left as they were (a
    client retry holds one and finishes it itself). Run it in the transaction that
    read what the answers say, as a phase would.
    """
    now = timezone.now()
    final = []
    for record_id, answer in answers.items():
        assert answer.resource_id is not None, "a batch answer names what it is about"
        final.append(
            FinalAnswer(
                record_id=record_id,
                status=answer.status,
                body=answer_json(answer.body),
                headers=json.dumps(answer.headers),
                resource_type=answer.resource_type,
                resource_id=answer.resource_id,
            )
        )
    return records_finish(
        final,
        at_point=recovery_point,
        finished=RecoveryPoint.FINISHED,
        now=now,
        stale_before=now - timedelta(seconds=settings.IDEMPOTENCY_LOCK_TIMEOUT),
    )


def release(record: IdempotencyKey) -> None:
    """Give back a lock taken with ``acquire_abandoned`` without running anything."""
    _release(record)


def _outcome(record: IdempotencyKey, *, replayed: bool) -> Outcome:
    assert record.response_status is not None
    return Outcome(
        status=record.response_status,
        body_text=record.response_body,
        headers=dict(record.response_headers),
        replayed=replayed,
    )
