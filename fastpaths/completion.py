"""Agrees with ``reconcile.recovery.completion.record_complete``: pay requests finished in batches.

The reference finishes one abandoned record at a time, through the flow's last
phase (``idempotency.phases``, under the lock condition of
``idempotency.completer.acquire_abandoned``). This stores, for a whole batch,
the answer that path would store, in a constant number of statements; whatever
it leaves goes through the reference one by one. ``tests/fastpaths/test_completion.py``
compares the stored rows with a phase's, byte for byte, and
``tests/fastpaths/test_reconcile.py`` compares the batched pass with the core's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from idempotency.models import IdempotencyKey, RecoveryPoint
from idempotency.phases import Respond, answer_json
from orders.serializers import order_representations
from payments.answers import pay_answer
from payments.models import Payment, PaymentStatus
from payments.providers import PaymentProvider
from reconcile.recovery.completion import PAY, Completion, is_pay_request, record_complete
from reconcile.selectors import PAYMENT_RESOURCE, records_unfinished_of

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


def finish_abandoned(answers: Mapping[int, Respond], *, recovery_point: str) -> set[int]:
    """Store final answers in many abandoned records at once.

    ``answers``: record id -> the ``Respond`` its flow would end with from
    ``recovery_point``. A record is finished only if it is still there, names the
    answer's resource, and no live request holds it (free, or older than
    IDEMPOTENCY_LOCK_TIMEOUT: the condition of ``acquire_abandoned``). Then it gets
    exactly what a flow's final phase writes (``phases._apply``), in one statement for the
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


def complete_pay_requests(*, payment_ids: list[int], provider: PaymentProvider) -> int:
    """``complete_requests_for`` the pay requests of a batch of settled attempts, at once.

    What a client retry (or ``record_complete``) would store for each request at
    ``payment_created`` whose attempt is settled is ``pay_answer`` of the attempt,
    with no provider call. So, in one transaction, as a phase: the attempts are
    read in one query, the paid orders' representations in one query per table,
    and every record no live request holds is finished with its answer in one
    statement (``finish_abandoned``). What that leaves (a record at another point,
    held by a live retry, or whose attempt is not final) goes through
    ``record_complete`` one by one. Returns how many requests were finished.
    """
    records = records_unfinished_of(resource_type=PAYMENT_RESOURCE, ids=payment_ids)
    if not records:
        return 0
    at_pay_point = {
        record.pk: record.resource_id
        for record in records
        if record.recovery_point == PAY.point and is_pay_request(record)
    }
    with transaction.atomic():
        attempts = Payment.objects.in_bulk([pid for pid in at_pay_point.values() if pid])
        bodies = order_representations(
            order_ids=[p.order_id for p in attempts.values() if p.status == PaymentStatus.SUCCEEDED]
        )
        answers = {}
        for record_id, payment_id in at_pay_point.items():
            attempt = attempts.get(payment_id or 0)
            if attempt is None:
                continue
            answer = pay_answer(attempt, order_body=partial(bodies.__getitem__, attempt.order_id))
            if answer is not None:
                answers[record_id] = answer
        finished = finish_abandoned(answers, recovery_point=PAY.point)
    left = [record.pk for record in records if record.pk not in finished]
    return len(finished) + sum(
        record_complete(record_id=record_id, provider=provider) is Completion.FINISHED
        for record_id in left
    )
