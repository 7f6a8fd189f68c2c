"""Resolve payment attempts whose outcome is unknown, by asking the provider.

An attempt is unsettled (PENDING or UNKNOWN) while we do not know whether the
provider charged it: the request timed out, the provider answered 5xx, or the
process died between phases. Once it is older than RECONCILE_AFTER_S, nobody is
waiting on the provider for it any more, and the reconciler finds out:

    query(out_trade_no)
      SUCCESS  -> roll forward: payment_settle (PAID, ledger entry, shipment)
      DECLINED -> roll back: payment_settle (FAILED, declined)
      CLOSED   -> roll back: an earlier pass fenced it and died before settling
      nothing  -> close(out_trade_no) FIRST, then settle with what close says:
                  CLOSED -> FAILED "closed"; SUCCESS (it slipped in) -> roll forward
      unreachable -> leave it exactly as it is; try again after a backoff

The fence is what makes "no charge" final: without it, a charge still on its
way (a retry, a slow provider) could succeed after we marked the attempt
FAILED, and the customer would pay for an order we let them pay again.

Then the request that made the attempt is finished through the completer (the
same pay flow phases as a client retry), so the customer's retry with the same
key replays the final answer: 200 with the order, or 402 ``payment-failed``.

Claiming: attempts are leased in one short statement (``UPDATE ... WHERE id IN
(SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) RETURNING *``) and processed after
it committed, so no row lock is held while we wait on the provider. Two
reconcilers get disjoint batches; even if a lease runs out under a slow one,
``payment_settle`` is conditional and settles each attempt once.
"""

from __future__ import annotations

import enum
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from payments.models import UNSETTLED_STATUSES, Payment, PaymentStatus
from payments.providers import PaymentProvider, ProviderOutcomeUnknown, get_provider
from payments.services import Settlement, payment_settle
from reconcile.selectors import records_unfinished_for_payments
from reconcile.services.completion import Completion, record_complete

logger = logging.getLogger(__name__)

# Attempts per claim. Each costs one or two provider calls (tens of ms when the
# provider is healthy, PROVIDER_TIMEOUT_S when it hangs): 50 keeps a batch short
# enough that its lease (RECONCILE_LEASE_S) covers it even when every call times
# out, and large enough that the claim statement is a small share of the work.
BATCH_SIZE = 50
# Backoff exponents stop here: 2**20 x the base is far past any sane cap anyway.
_MAX_EXPONENT = 20
# The pass budget's clock (a module attribute, so a test can make time run out).
_monotonic = time.monotonic


class Resolution(enum.Enum):
    """What reconciling one attempt did."""

    ROLLED_FORWARD = "rolled_forward"  # the provider charged: SUCCEEDED, order PAID
    ROLLED_BACK = "rolled_back"  # declined, or fenced with no charge: FAILED
    ALREADY_SETTLED = "already_settled"  # a callback or a client retry settled it first
    UNREACHABLE = "unreachable"  # no answer from the provider: backoff, nothing guessed
    CONFLICT = "conflict"  # the provider contradicts our books: left for a human (audit)
    ERROR = "error"  # a bug or a database failure: logged, retried after a backoff


# After these the attempt is final, and the request that made it can be finished.
_SETTLED = {Resolution.ROLLED_FORWARD, Resolution.ROLLED_BACK, Resolution.ALREADY_SETTLED}


@dataclass(frozen=True)
class ReconcileCounts:
    """What one pass did, by outcome (``completed``: requests finished afterwards)."""

    claimed: int = 0
    rolled_forward: int = 0
    rolled_back: int = 0
    already_settled: int = 0
    unreachable: int = 0
    conflict: int = 0
    error: int = 0
    completed: int = 0
    handed_back: int = 0  # claimed, but the pass ran out of time first: released


def backoff_delay_s(
    *, attempt: int, base_s: float, cap_s: float, rand: Callable[[], float] = random.random
) -> float:
    """Seconds to wait before try ``attempt + 1`` after ``attempt`` failures (1, 2, ...).

    Exponential (base, 2 x base, 4 x base, ...) up to ``cap_s``, with "equal
    jitter": a uniformly random point in the upper half of that window. The
    random half spreads out attempts that failed together (a provider outage
    fails them all at once), so they do not all come back in the same second;
    the fixed half keeps a retry from landing right after the failure, which
    full jitter (0 .. window) would allow.
    """
    window = min(cap_s, base_s * 2 ** min(max(attempt, 1) - 1, _MAX_EXPONENT))
    return window / 2 + rand() * window / 2


def _claim(*, now: datetime, limit: int) -> list[Payment]:
    """Lease up to ``limit`` due attempts to this runner; return them.

    Due: unsettled, untouched for RECONCILE_AFTER_S, and neither leased nor
    backing off. Oldest first, read straight off the partial index of unsettled
    attempts (``payment_unsettled_idx``), which holds only the work left to do.
    SKIP LOCKED: rows another runner is claiming right now are not waited for,
    they are simply not ours. ``updated_at`` is left alone (the age of an attempt
    is its last real change, not our bookkeeping).
    """
    table = Payment._meta.db_table
    statuses = ", ".join(["%s"] * len(UNSETTLED_STATUSES))
    sql = f"""
        UPDATE {table} SET next_reconcile_at = %s
        WHERE id IN (
            SELECT id FROM {table}
            WHERE status IN ({statuses}) AND updated_at <= %s
              AND (next_reconcile_at IS NULL OR next_reconcile_at <= %s)
            ORDER BY updated_at
            LIMIT %s
            FOR UPDATE SKIP LOCKED)
        RETURNING *
    """  # noqa: S608 - the table name is ours, every value is a parameter
    lease_until = now + timedelta(seconds=settings.RECONCILE_LEASE_S)
    due_before = now - timedelta(seconds=settings.RECONCILE_AFTER_S)
    params = [lease_until, *UNSETTLED_STATUSES, due_before, now, limit]
    # One statement in autocommit mode is its own short transaction: the row locks
    # end with it, before any provider call.
    return list(Payment.objects.raw(sql, params))


def _hand_back(*, payments: list[Payment]) -> int:
    """End our lease on attempts we claimed but did not get to: due again at once."""
    if not payments:
        return 0
    # One claim, one lease time. Matching on it ends only our lease: if it ran out
    # and another runner leased a row again, that lease is not ours to end.
    return Payment.objects.filter(
        pk__in=[payment.pk for payment in payments],
        next_reconcile_at=payments[0].next_reconcile_at,
    ).update(next_reconcile_at=None)


def _retry_later(*, payment: Payment, now: datetime) -> None:
    """Count the failed try and put the attempt back after a backoff (if still unsettled)."""
    attempt = payment.reconcile_attempts + 1
    delay = backoff_delay_s(
        attempt=attempt,
        base_s=settings.RECONCILE_BACKOFF_BASE_S,
        cap_s=settings.RECONCILE_BACKOFF_CAP_S,
    )
    Payment.objects.filter(pk=payment.pk, status__in=UNSETTLED_STATUSES).update(
        reconcile_attempts=F("reconcile_attempts") + 1,
        next_reconcile_at=now + timedelta(seconds=delay),
    )


def payment_reconcile(
    *, payment: Payment, provider: PaymentProvider, now: datetime | None = None
) -> Resolution:
    """Settle one unsettled attempt from the provider's account of it (see the module doc).

    Called outside any transaction: the provider calls must not hold row locks.
    """
    now = now or timezone.now()
    try:
        account = provider.query(out_trade_no=payment.out_trade_no)
        if account is None:
            # The provider never saw it. Fence before failing it: after close, no
            # charge for this attempt can succeed, so FAILED is final. If a charge
            # got in first, close tells us, and we roll forward instead.
            account = provider.close(out_trade_no=payment.out_trade_no)
    except ProviderOutcomeUnknown as error:
        logger.warning("payment %s: provider unreachable (%s); backing off", payment.pk, error)
        _retry_later(payment=payment, now=now)
        return Resolution.UNREACHABLE
    settled = payment_settle(payment_id=payment.pk, result=account)
    match settled.outcome:
        case Settlement.APPLIED if settled.payment.status == PaymentStatus.SUCCEEDED:
            return Resolution.ROLLED_FORWARD
        case Settlement.APPLIED:
            return Resolution.ROLLED_BACK
        case Settlement.ALREADY_APPLIED:
            return Resolution.ALREADY_SETTLED
        case Settlement.CONFLICT:
            # payment_settle logged it and changed nothing. Asking again at backoff
            # pace costs little and notices if the provider corrects itself.
            _retry_later(payment=payment, now=now)
            return Resolution.CONFLICT
    raise AssertionError(f"unexpected settlement {settled.outcome}")  # pragma: no cover


def _reconcile_guarded(*, payment: Payment, provider: PaymentProvider) -> Resolution:
    # One attempt's bug or database hiccup must not stop the others; it is logged
    # and backs off like an unreachable provider, so it cannot spin in a hot loop.
    try:
        return payment_reconcile(payment=payment, provider=provider)
    except Exception:
        logger.exception("payment %s: reconciliation failed", payment.pk)
        _retry_later(payment=payment, now=timezone.now())
        return Resolution.ERROR


def _complete_requests(*, payment_ids: list[int], provider: PaymentProvider) -> int:
    """Finish the requests that made these (now settled) attempts; how many finished."""
    finished = 0
    for record_id in records_unfinished_for_payments(payment_ids=payment_ids):
        if record_complete(record_id=record_id, provider=provider) is Completion.FINISHED:
            finished += 1
    return finished


def run_once(
    *,
    provider: PaymentProvider | None = None,
    batch_size: int = BATCH_SIZE,
    budget_s: float | None = None,
) -> ReconcileCounts:
    """Reconcile every due attempt, batch by batch, until none is due or time is up."""
    provider = provider or get_provider()
    budget = settings.RECONCILE_PASS_BUDGET_S if budget_s is None else budget_s
    deadline = _monotonic() + budget
    counts: Counter[str] = Counter()
    while _monotonic() < deadline:
        batch = _claim(now=timezone.now(), limit=batch_size)
        if not batch:
            break
        counts["claimed"] += len(batch)
        settled_ids: list[int] = []
        for index, payment in enumerate(batch):
            if _monotonic() >= deadline:
                counts["handed_back"] += _hand_back(payments=batch[index:])
                break
            resolution = _reconcile_guarded(payment=payment, provider=provider)
            counts[resolution.value] += 1
            if resolution in _SETTLED:
                settled_ids.append(payment.pk)
        counts["completed"] += _complete_requests(payment_ids=settled_ids, provider=provider)
    return ReconcileCounts(**counts)
