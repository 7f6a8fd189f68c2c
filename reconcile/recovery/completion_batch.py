"""Fast path: settled pay requests finished a batch at once, agreeing with ``record_complete``.

The reference finishes one abandoned record at a time, through the flow. This
stores, for a whole batch, the answer that path would store, in a constant
number of statements; whatever it leaves goes through the reference one by one.
tests/reconcile/test_batch_settlement.py checks that each request it finishes
answers as it would have alone.
"""

from __future__ import annotations

from functools import partial

from django.db import transaction

from idempotency.completer import finish_abandoned
from orders.serializers import order_representations
from payments.answers import pay_answer
from payments.models import Payment, PaymentStatus
from payments.providers import PaymentProvider
from reconcile.recovery.completion import PAY, Completion, is_pay_request, record_complete
from reconcile.selectors import PAYMENT_RESOURCE, records_unfinished_of


def complete_pay_requests(*, payment_ids: list[int], provider: PaymentProvider) -> int:
    """``complete_requests_for`` the pay requests of a batch of settled attempts, at once.

    What a client retry (or ``record_complete``) would store for each request at
    ``payment_created`` whose attempt is settled is ``pay_answer`` of the attempt,
    with no provider call. So, in one transaction, as a phase: the attempts are
    read in one query, the paid orders' representations in one query per table,
    and every record no live request holds is finished with its answer in one
    statement (``finish_abandoned``: the completer's lock condition and the
    phase's fenced write together). What that leaves (a record at another point,
    held by a live retry, or whose attempt is not final) is tried one by one, as
    before. Returns how many requests were finished.
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
