"""Fast path: many abandoned records finished in one statement, agreeing with a final phase.

The reference it must agree with: ``records_finish`` is what a flow's final
phase writes (``idempotency.phases._apply`` and its fenced UPDATE, under the
lock condition of ``idempotency.core.take_lock``), for many records at once,
which the ORM cannot say. ``tests/idempotency/test_sql.py`` runs both on the
same cases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from idempotency.models import IdempotencyKey

_TABLE = IdempotencyKey._meta.db_table


# The completer's lock condition (``core.take_lock``: free, or older than the lock
# timeout) and the phase's fenced write of a final answer (``phases._apply``), as one
# conditional UPDATE per batch: a record a live request holds is not touched, nor
# one that moved on or names another resource than the answer is about. The rows
# are locked in id order first (the subquery), so two completers finishing
# overlapping batches wait for each other instead of deadlocking; the one that
# waited re-reads each row and finds it finished.
_FINISH = f"""
    UPDATE "{_TABLE}" AS k
    SET recovery_point = %s, response_status = v.status, response_body = v.body,
        response_headers = v.headers::jsonb, finished_at = %s,
        lock_token = NULL, locked_at = NULL
    FROM unnest(%s::bigint[], %s::int[], %s::text[], %s::text[], %s::text[], %s::bigint[])
        AS v(id, status, body, headers, resource_type, resource_id)
    WHERE k.id = v.id
      AND k.id IN (SELECT id FROM "{_TABLE}" WHERE id = ANY(%s) ORDER BY id FOR UPDATE)
      AND k.recovery_point = %s
      AND k.resource_type = v.resource_type AND k.resource_id = v.resource_id
      AND (k.locked_at IS NULL OR k.locked_at < %s)
    RETURNING k.id
"""  # noqa: S608


@dataclass(frozen=True)
class FinalAnswer:
    """A stored answer for one record, as ``phases._apply`` writes a ``Respond``."""

    record_id: int
    status: int
    body: str  # the JSON text, encoded once (``phases.answer_json``)
    headers: str  # the headers as JSON text
    resource_type: str
    resource_id: int


def records_finish(
    answers: Sequence[FinalAnswer],
    *,
    at_point: str,
    finished: str,
    now: datetime,
    stale_before: datetime,
) -> set[int]:
    """Finish the records still at ``at_point`` that nobody live holds; the ids finished."""
    if not answers:
        return set()
    params: list[Any] = [
        finished,
        now,
        [a.record_id for a in answers],
        [a.status for a in answers],
        [a.body for a in answers],
        [a.headers for a in answers],
        [a.resource_type for a in answers],
        [a.resource_id for a in answers],
        [a.record_id for a in answers],
        at_point,
        stale_before,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_FINISH, params)
        return {row[0] for row in cursor.fetchall()}
