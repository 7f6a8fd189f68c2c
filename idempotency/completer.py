"""The completer's way into the core (reconcile/): the lock a retry takes, without a request.

``acquire_abandoned`` takes an abandoned record with the same conditional UPDATE
as a client retry, and ``resume`` runs its flow as a retry would.
"""

from __future__ import annotations

from collections.abc import Callable

from django.utils import timezone

from idempotency import phases
from idempotency.core import take_lock
from idempotency.errors import IdempotencyKeyInUse
from idempotency.models import IdempotencyKey
from idempotency.phases import LockLost


def acquire_abandoned(*, record_id: int) -> IdempotencyKey | None:
    """Lock an unfinished record that no live request holds, for the completer.

    The same conditional UPDATE as a client retry takes (``take_lock``): the
    lock must be free or older than IDEMPOTENCY_LOCK_TIMEOUT, and of everyone
    racing for it exactly one wins. None when the record is finished, gone, or
    held by a request that is still alive: the caller leaves it alone.

    The returned record carries the new token, so every phase the caller runs
    through ``resume`` commits only while it still holds the lock.
    """
    token = take_lock(record_id=record_id, now=timezone.now())
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
    except LockLost as error:
        raise IdempotencyKeyInUse("The record was taken over by a retry.") from error
    except BaseException:
        phases.release(record)
        raise
    if not record.is_finished:
        phases.release(record)
        raise RuntimeError(f"flow returned at recovery point {record.recovery_point!r}")


def release(record: IdempotencyKey) -> None:
    """Give back a lock taken with ``acquire_abandoned`` without running anything."""
    phases.release(record)
