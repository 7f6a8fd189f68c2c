"""Writes on idempotency records outside a request: the reaper."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Protocol, TypeVar

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from idempotency.models import IdempotencyKey, RecoveryPoint

logger = logging.getLogger(__name__)

# Small batches keep each DELETE's row locks and WAL burst short, so the reaper
# never stalls live traffic on the same table.
REAP_BATCH_SIZE = 1000


@dataclass(frozen=True)
class ReapResult:
    deleted: int
    batches: int
    longest_batch_s: float  # the longest single transaction (and so lock) the reaper held
    unfinished_kept: int  # unfinished records past the window: never reaped, reported
    failed: int = 0  # records whose delete raised: left, counted by the caller's failure isolation


T = TypeVar("T")


class Isolation(Protocol):
    """How a batch job runs one item so that its failure stays its own: the reconciler
    registers its own (``reconcile.desk.isolation.FailureIsolation``: counted, backed off, a
    case after CASE_AFTER_FAILURES); without it, the reaper logs and skips."""

    def due(self, key: object) -> bool: ...

    def run(self, *, key: object, reference: str, work: Callable[[], T], failed: T) -> T: ...


class LogAndSkip:
    """The reaper's own isolation, for callers without a desk: log the item, go on."""

    def due(self, key: object) -> bool:
        return True

    def run(self, *, key: object, reference: str, work: Callable[[], T], failed: T) -> T:
        try:
            return work()
        except Exception:
            logger.exception("record %s (%s): not reaped", key, reference)
            return failed


# Who isolates the reaper's records: the reconciler registers its failure isolation at start-up
# (reconcile/apps.py), so every caller (beat's task, the command, a pass) gets the
# desk's counting without this layer importing the one above it.
_isolation_factory: Callable[[], Isolation] = LogAndSkip


def reap_isolation_register(factory: Callable[[], Isolation]) -> None:
    """Make ``factory()`` the isolation of every reap that does not pass its own."""
    global _isolation_factory  # set once, at start-up
    _isolation_factory = factory


def idempotency_key_reap(
    *,
    now: datetime | None = None,
    batch_size: int = REAP_BATCH_SIZE,
    isolation: Isolation | None = None,
) -> ReapResult:
    """Delete finished records older than IDEMPOTENCY_KEY_TTL, a batch per transaction.

    Unfinished records are never deleted whatever their age: they are requests
    whose outcome is not settled yet (the reconciler and completer own them).

    One record whose delete fails (a row the database refuses) never stops the
    reaper: a batch that fails is deleted again record by record through
    ``isolation``, so only the bad record is left (and kept out of the later
    batches of this run).
    """
    now = now or timezone.now()
    isolation = isolation or _isolation_factory()
    cutoff = now - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)
    # SKIP LOCKED: a record a request is replaying right now is simply left for the
    # next batch instead of making the reaper wait. (IdempotencyKey's table.)
    sql = (
        "DELETE FROM idempotency_idempotencykey WHERE id IN ("
        "  SELECT id FROM idempotency_idempotencykey"
        "  WHERE recovery_point = %s AND finished_at < %s"
        "  AND id <> ALL(%s) ORDER BY finished_at LIMIT %s FOR UPDATE SKIP LOCKED)"
    )
    left: list[int] = []  # records that failed (or back off) this run: not batched again
    deleted = batches = 0
    longest = 0.0
    while True:
        started = time.perf_counter()
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql, [RecoveryPoint.FINISHED, cutoff, left, batch_size])
                count = taken = cursor.rowcount
        except DatabaseError:
            logger.warning("a batch of records not reaped together; one by one", exc_info=True)
            count, taken = _reap_one_by_one(
                cutoff=cutoff, batch_size=batch_size, left=left, isolation=isolation
            )
        longest = max(longest, time.perf_counter() - started)
        deleted += count
        batches += 1
        if taken < batch_size:
            break
    unfinished = (
        IdempotencyKey.objects.exclude(recovery_point=RecoveryPoint.FINISHED)
        .filter(created_at__lt=cutoff)
        .count()
    )
    return ReapResult(
        deleted=deleted,
        batches=batches,
        longest_batch_s=longest,
        unfinished_kept=unfinished,
        failed=len(left),
    )


def _reap_one_by_one(
    *, cutoff: datetime, batch_size: int, left: list[int], isolation: Isolation
) -> tuple[int, int]:
    """The batch the bulk DELETE failed on, record by record: (deleted, batch size)."""
    batch = list(
        IdempotencyKey.objects.filter(recovery_point=RecoveryPoint.FINISHED, finished_at__lt=cutoff)
        .exclude(pk__in=left)
        .order_by("finished_at")
        .values_list("pk", "key")[:batch_size]
    )
    deleted = 0
    for pk, key in batch:
        if not isolation.due(pk):
            left.append(pk)  # failed lately: backing off
            continue
        one = isolation.run(key=pk, reference=key, work=partial(_reap_one, pk, cutoff), failed=-1)
        if one < 0:
            left.append(pk)
        deleted += max(one, 0)
    return deleted, len(batch)


def _reap_one(pk: int, cutoff: datetime) -> int:
    # The same conditions as the batch: still finished, still past the window.
    return IdempotencyKey.objects.filter(
        pk=pk, recovery_point=RecoveryPoint.FINISHED, finished_at__lt=cutoff
    ).delete()[0]
