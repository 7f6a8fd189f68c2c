"""The batched completion (a fast path) agrees with a flow's final phase (its reference).

``finish_abandoned`` (``records_finish`` under it) against what
``idempotency.phases`` writes when a flow finishes a record: the same answer
through both, the same rows and the same bytes; and what a phase could not
commit, the batch does not either.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from fastpaths.completion import finish_abandoned
from idempotency import phases
from idempotency.models import IdempotencyKey, RecoveryPoint
from tests.fastpaths.records import pay_record, stored

pytestmark = pytest.mark.django_db


def test_records_finish_writes_what_a_final_phase_writes(user, settings):
    # Given two abandoned records alike (their lock older than the timeout)
    settings.IDEMPOTENCY_LOCK_TIMEOUT = 60
    stale = timezone.now() - timedelta(seconds=61)
    by_phase, batched = (
        pay_record(user, "ref"),
        pay_record(user, "fast"),
    )
    for record in (by_phase, batched):
        record.locked_at = stale
        record.save(force_insert=True)
    answer = phases.Respond(
        status=200,
        body={"number": "A-1", "amount": 1999, "note": "é"},
        headers={"Location": "/api/v1/orders/A-1/"},
        resource_type="payment",
        resource_id=7,
    )

    # When a phase finishes one with the answer and the batch the other
    phases.atomic_phase(by_phase, lambda: answer)
    finished = finish_abandoned({batched.pk: answer}, recovery_point="payment_created")

    # Then both rows hold the same answer, byte for byte, and no lock
    assert finished == {batched.pk}
    ref, fast = stored("ref"), stored("fast")
    for row in (ref, fast):
        assert row.pop("finished_at") is not None
        row.pop("created_at")  # made a moment apart
    assert fast == ref
    assert fast["response_body"] == phases.answer_json(answer.body)
    assert (fast["lock_token"], fast["locked_at"]) == (None, None)
    assert fast["recovery_point"] == RecoveryPoint.FINISHED


def test_records_finish_leaves_what_a_phase_could_not_commit(user):
    # A live lock: a phase fenced on another token commits nothing; neither does the batch
    live = pay_record(user, "live")
    live.save(force_insert=True)
    answer = phases.Respond(status=200, body={}, resource_type="payment", resource_id=7)

    assert finish_abandoned({live.pk: answer}, recovery_point="payment_created") == set()
    intruder = IdempotencyKey.objects.get(pk=live.pk)
    intruder.lock_token = uuid.uuid4()
    with pytest.raises(phases.LockLost):
        phases.atomic_phase(intruder, lambda: answer)
    assert stored("live")["recovery_point"] == "payment_created"
