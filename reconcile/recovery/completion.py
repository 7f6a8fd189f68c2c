"""Finish requests their clients abandoned, through the same phases a retry would run.

A request whose client never came back (it crashed, it gave up after a 503, it
was killed mid-phase) leaves its record unfinished. The completer takes such a
record when no live request holds it (lock free, or older than
IDEMPOTENCY_LOCK_TIMEOUT: ``idempotency.completer.acquire_abandoned``, the same
conditional UPDATE a retry uses) and runs the endpoint's flow from the
record's recovery point (``idempotency.completer.resume``). Nothing is written by
hand: the stored answer is the one the flow produces, exactly what the client
would have got, and what its retry with the same key now replays.

What it will not do is decide a payment. A record at ``payment_created`` whose
attempt is still unsettled is left to the reconciler: running the flow would
call the provider's charge, and a background job must not start charging a
customer who walked away. The reconciler settles the attempt (query, or fence
and fail) and then finishes its record (``complete_requests_for``, one by one
through ``record_complete``). A refund request at ``refund_created`` is treated
the same way: the refund reconciler settles the refund (query, or send it again
with the same derived key) first.

A record at ``started`` holds no committed effect (the first phase inserts the
record together with its business rows), so there is nothing to finish and
nothing to infer: its lock is released and it is reported, never guessed at.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.urls import Resolver404, resolve
from django.utils import timezone

from idempotency.completer import acquire_abandoned, release, resume
from idempotency.errors import IdempotencyKeyInUse
from idempotency.models import IdempotencyKey, RecoveryPoint
from observability import context
from payments.errors import PaymentOutcomeUnknown, RefundOutcomeUnknown
from payments.flows import PayPoint, order_pay_flow
from payments.models import (
    UNSETTLED_REFUND_STATUSES,
    UNSETTLED_STATUSES,
    Payment,
    Refund,
)
from payments.providers import PaymentProvider, get_provider
from payments.refund_flows import RefundPoint, order_refund_flow
from payments.refunds import RefundRequest
from reconcile.desk.isolation import COMPLETION, FailureIsolation
from reconcile.selectors import (
    PAYMENT_RESOURCE,
    REFUND_RESOURCE,
    records_abandoned,
    records_unfinished_for,
)

logger = logging.getLogger(__name__)

# Records examined per read. Unfinished records are few (requests in flight and
# the rare abandoned one), so this mostly bounds one query's result, not the pass.
BATCH_SIZE = 100


class Completion(enum.Enum):
    """What the completer did with one record."""

    FINISHED = "finished"  # driven to the end: its stored answer now replays
    BUSY = "busy"  # a live request holds it, or it finished meanwhile: not ours
    # Its payment (or refund) attempt is unsettled: the reconciler's turn.
    AWAITING_PAYMENT = "awaiting_payment"
    UNRESOLVED = "unresolved"  # the flow could not finish (outcome unknown): released
    STARTED = "started"  # nothing committed to resume from: released and reported
    UNSUPPORTED = "unsupported"  # a route or state the completer does not know: reported
    ERROR = "error"  # the flow failed unexpectedly: logged, released, tried next pass


@dataclass(frozen=True)
class CompleteCounts:
    """What one completer pass did, by outcome."""

    examined: int = 0
    finished: int = 0
    busy: int = 0
    awaiting_payment: int = 0
    unresolved: int = 0
    started: int = 0
    unsupported: int = 0
    error: int = 0


Resumable = tuple[str, Callable[[IdempotencyKey], None]]


@dataclass(frozen=True)
class _MoneyFlow:
    """A flow whose record, past its first phase, names an attempt at the provider."""

    point: str  # the recovery point after the attempt committed
    # Later points that still name the attempt (a provider's extra phase).
    also: tuple[str, ...]
    resource_type: str
    unsettled: tuple[str, ...]  # the attempt's statuses that are the reconciler's turn
    unknown: type[Exception]  # what the flow raises while the outcome is unknown
    # The attempt's status and the flow to resume with, or None if it is gone.
    load: Callable[[int, IdempotencyKey, PaymentProvider], Resumable | None]


def _pay_attempt(
    payment_id: int, record: IdempotencyKey, provider: PaymentProvider
) -> Resumable | None:
    payment = Payment.objects.select_related("order").filter(pk=payment_id).first()
    if payment is None:
        return None
    # The flow's first phase would use the order number; past it, it is informative.
    flow = partial(
        order_pay_flow, user_id=record.user_id, order_number=payment.order.number, provider=provider
    )
    return payment.status, flow


def _refund_attempt(
    refund_attempt_id: int, record: IdempotencyKey, provider: PaymentProvider
) -> Resumable | None:
    refund = Refund.objects.select_related("payment__order").filter(pk=refund_attempt_id).first()
    if refund is None:
        return None
    # Likewise: past refund_created the request's details are informative only.
    request = RefundRequest(
        user_id=record.user_id,
        is_staff=False,
        order_number=refund.payment.order.number,
        amount=refund.amount,
        reason=refund.reason,
    )
    return refund.status, partial(order_refund_flow, request=request, provider=provider)


PAY = _MoneyFlow(
    PayPoint.PAYMENT_CREATED,
    (PayPoint.CHARGE_PREPARED,),
    PAYMENT_RESOURCE,
    UNSETTLED_STATUSES,
    PaymentOutcomeUnknown,
    _pay_attempt,
)
REFUND = _MoneyFlow(
    RefundPoint.REFUND_CREATED,
    (),
    REFUND_RESOURCE,
    UNSETTLED_REFUND_STATUSES,
    RefundOutcomeUnknown,
    _refund_attempt,
)


def _complete_money_flow(
    spec: _MoneyFlow, record: IdempotencyKey, provider: PaymentProvider
) -> Completion:
    """A pay (refund) request at ``payment_created`` (``refund_created``): finish it if
    its attempt is settled; otherwise leave it to the reconciler."""
    loaded = None
    if record.recovery_point in (spec.point, *spec.also) and (
        record.resource_type == spec.resource_type and record.resource_id is not None
    ):
        loaded = spec.load(record.resource_id, record, provider)
    if loaded is None:
        release(record)
        logger.error("record %s: %s request without its attempt", record.pk, spec.resource_type)
        return Completion.UNSUPPORTED
    status, flow = loaded
    # Settled is final, so this read cannot go stale before the flow reads it again.
    if status in spec.unsettled:
        release(record)
        return Completion.AWAITING_PAYMENT
    try:
        resume(record, flow)  # the provider is not called: the attempt is settled
    except spec.unknown:
        return Completion.UNRESOLVED  # resume released the lock
    return Completion.FINISHED


# Route name (urls.py) and method -> how to finish a request of that endpoint.
# Order creation and cancellation are single-phase: never unfinished past `started`.
_COMPLETERS: dict[tuple[str, str], Callable[[IdempotencyKey, PaymentProvider], Completion]] = {
    ("POST", "order-pay"): partial(_complete_money_flow, PAY),
    ("POST", "order-refund"): partial(_complete_money_flow, REFUND),
}


def _completer_for(record: IdempotencyKey) -> Callable[..., Completion] | None:
    try:
        route = resolve(record.path).url_name or ""
    except Resolver404:
        return None
    return _COMPLETERS.get((record.method.upper(), route))


@context.isolated
def _record_complete(*, record_id: int, provider: PaymentProvider) -> Completion:
    """Drive one abandoned record to its end, or leave it (released) and say why; raises
    what the flow (or the record's own row) raised unexpectedly."""
    record = acquire_abandoned(record_id=record_id)
    if record is None:
        return Completion.BUSY
    if record.recovery_point == RecoveryPoint.STARTED:
        release(record)
        logger.warning("record %s (%s %s) left at started", record.pk, record.method, record.path)
        return Completion.STARTED
    completer = _completer_for(record)
    if completer is None:
        release(record)
        logger.error("record %s: no completer for %s %s", record.pk, record.method, record.path)
        return Completion.UNSUPPORTED
    try:
        return completer(record, provider)
    except IdempotencyKeyInUse:
        return Completion.BUSY  # a client retry took it over: it will finish it
    except Exception:
        # The record stays where it was committed. Releasing twice is harmless (the
        # release is fenced on our token), so release whether or not resume did.
        release(record)
        raise


def record_complete(*, record_id: int, provider: PaymentProvider | None = None) -> Completion:
    """Drive one abandoned record to its end, or leave it (released) and say why."""
    try:
        return _record_complete(record_id=record_id, provider=provider or get_provider())
    except Exception:
        logger.exception("record %s: completion failed", record_id)
        return Completion.ERROR


def complete_requests_for(*, resource_type: str, ids: list[int], provider: PaymentProvider) -> int:
    """Finish the requests that made these (now settled) attempts; how many finished."""
    finished = 0
    for record_id in records_unfinished_for(resource_type=resource_type, ids=ids):
        if record_complete(record_id=record_id, provider=provider) is Completion.FINISHED:
            finished += 1
    return finished


def is_pay_request(record: IdempotencyKey) -> bool:
    """The record is a pay request's (POST /api/v1/orders/{number}/pay/)."""
    return _completer_for(record) is _COMPLETERS[("POST", "order-pay")]


def run_once(
    *, provider: PaymentProvider | None = None, batch_size: int = BATCH_SIZE
) -> CompleteCounts:
    """Try every abandoned record once, each in failure isolation: a record that raises
    (its row refused, a flow's bug) is counted, backs off and, after
    CASE_AFTER_FAILURES, is a case, while the pass finishes every other record."""
    provider = provider or get_provider()
    stale_before = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_LOCK_TIMEOUT)
    isolation = FailureIsolation(job=COMPLETION, subject_type="record")
    counts: Counter[str] = Counter()
    after_id = 0
    while batch := records_abandoned(
        stale_before=stale_before, after_id=after_id, limit=batch_size
    ):
        after_id = batch[-1][0]
        for record_id, key in batch:
            if not isolation.due(record_id):
                continue  # failed lately: backing off
            counts["examined"] += 1
            completed = isolation.run(
                key=record_id,
                reference=key,
                work=partial(_record_complete, record_id=record_id, provider=provider),
                failed=Completion.ERROR,
            )
            counts[completed.value] += 1
    return CompleteCounts(**counts)
