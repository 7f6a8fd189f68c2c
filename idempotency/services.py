"""Writes on idempotency records outside a request: the reaper."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from idempotency.models import IdempotencyKey, RecoveryPoint

# Small batches keep each DELETE's row locks and WAL burst short, so the reaper
# never stalls live traffic on the same table.
REAP_BATCH_SIZE = 1000


@dataclass(frozen=True)
class ReapResult:
    deleted: int
    batches: int
    longest_batch_s: float  # the longest single transaction (and so lock) the reaper held
    unfinished_kept: int  # unfinished records past the window: never reaped, reported


def idempotency_key_reap(
    *, now: datetime | None = None, batch_size: int = REAP_BATCH_SIZE
) -> ReapResult:
    """Delete finished records older than IDEMPOTENCY_KEY_TTL, a batch per transaction.

    Unfinished records are never deleted whatever their age: they are requests
    whose outcome is not settled yet (the reconciler and completer own them).
    """
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)
    table = IdempotencyKey._meta.db_table
    # SKIP LOCKED: a record a request is replaying right now is simply left for the
    # next batch instead of making the reaper wait.
    sql = (
        f"DELETE FROM {table} WHERE id IN ("  # noqa: S608 - the table name is ours
        f"  SELECT id FROM {table} WHERE recovery_point = %s AND finished_at < %s"
        f"  ORDER BY finished_at LIMIT %s FOR UPDATE SKIP LOCKED)"
    )
    deleted = batches = 0
    longest = 0.0
    while True:
        started = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [RecoveryPoint.FINISHED, cutoff, batch_size])
            count = cursor.rowcount
        longest = max(longest, time.perf_counter() - started)
        deleted += count
        batches += 1
        if count < batch_size:
            break
    unfinished = (
        IdempotencyKey.objects.exclude(recovery_point=RecoveryPoint.FINISHED)
        .filter(created_at__lt=cutoff)
        .count()
    )
    return ReapResult(
        deleted=deleted, batches=batches, longest_batch_s=longest, unfinished_kept=unfinished
    )
