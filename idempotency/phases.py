"""Atomic phases: a flow's work and the record's new state, committed together.

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
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction
from django.utils import timezone

from edge.errors import ApplicationError
from idempotency import records
from idempotency.errors import UnknownRecoveryPoint
from idempotency.models import IdempotencyKey, RecoveryPoint

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


def answer_json(body: Any) -> str:
    """The stored answer's text: encoded once, and sent as is to the first request
    and to every replay (the same bytes). Compact, as DRF renders JSON."""
    return json.dumps(
        body, cls=DjangoJSONEncoder, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


class KeyRaced(Exception):
    """Another request inserted the same (user, key) between our lookup and our insert."""


class LockLost(Exception):
    """Our lock token no longer matches: the record was taken over as abandoned."""


# --- Running a phase ---------------------------------------------------------------


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
    inserted = record.pk is not None
    try:
        _phase(record, work, insert_first=insert_first)
    except ApplicationError as error:
        if not error.final:
            raise
        answer = Respond.from_error(error)
        if not inserted:  # the INSERT (insert_first) rolled back with the phase
            record.pk = None
        _phase(record, lambda: answer, insert_first=insert_first)


def _phase(record: IdempotencyKey, work: Callable[[], PhaseResult], *, insert_first: bool) -> None:
    # One transaction: the record's INSERT or fenced UPDATE and the business rows
    # ``work`` writes commit together, or none of them does.
    with transaction.atomic():
        if insert_first and record.pk is None:
            _insert(record)
        result = work()
        held_token = record.lock_token  # `_apply` clears it on a final response
        changes = _apply(record, result)
        if not changes:
            return
        if record.pk is None:
            _insert(record)  # one statement: the record with its answer
            return
        # Fenced on our lock token: if a retry took the record over because we
        # looked dead, this matches no row and the whole phase rolls back.
        fenced = IdempotencyKey.objects.filter(pk=record.pk, lock_token=held_token)
        if not fenced.update(**changes):
            raise LockLost


def _insert(record: IdempotencyKey) -> None:
    """``record.save(force_insert=True)``, through the record store (idempotency/records.py)."""
    try:
        records.store().insert(record)
    except IntegrityError as error:
        # A concurrent request with the same key committed first (our INSERT waited
        # on its unique index entry). Start over: we will replay it. Raised inside
        # the phase's transaction, so everything the phase wrote rolls back with it.
        raise KeyRaced from error


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


def release(record: IdempotencyKey) -> None:
    """Give the lock back after a failed phase; the recovery point stays as committed."""
    if record.pk is None:
        return  # never inserted: the rollback left nothing behind
    IdempotencyKey.objects.filter(pk=record.pk, lock_token=record.lock_token).update(
        lock_token=None, locked_at=None
    )


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
