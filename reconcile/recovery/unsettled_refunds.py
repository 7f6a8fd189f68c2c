"""Resolve refund attempts whose outcome is unknown, and drive orphan refunds to the end.

A refund attempt is unsettled (PENDING or UNKNOWN) while we do not know whether
the provider refunded it: the request timed out, the provider answered 5xx,
the process died between phases, or it is the automatic refund of an orphaned
capture, which no request ever sends. Once it is older than RECONCILE_AFTER_S:

    query_refund(out_refund_no)
      SUCCESS  -> refund_settle: SUCCEEDED, ledger entry, refunded amount (REFUNDED)
      DECLINED -> refund_settle: FAILED
      nothing  -> send the refund again, same out_refund_no and same derived key,
                  and settle with the answer
      unreachable -> leave it exactly as it is; try again after a backoff

Sending again is safe where a charge needed a fence first: the provider creates
a refund idempotently (on our Idempotency-Key and on ``out_refund_no``), so a
send still on its way and ours are one refund there, never two; and the refund
is money we decided to give back anyway, so "it went through after all" is
the outcome we want, not one to prevent.

Then the request that made the attempt (if any) is finished through the
completer. An orphaned capture whose refund was declined gets its next refund
attempt here (``orphan_refund_start``), until one succeeds: a new reference (a
declined one is final at the provider), created at once so it is counted, and
sent after the reconciler's backoff from the last decline (``next_reconcile_at``),
as an unreachable provider is retried, so a provider that keeps declining is
not asked again on every pass. Declined is final for a reference, not for the
money: before each new attempt starts, and again right before it is sent, the
provider is asked about every earlier one, and one carried out late is booked
instead. A later attempt still unsent when
that happens is cancelled here (``SUPERSEDED``), never sent; one already sent
is declined by the provider (nothing is left to refund), harmlessly.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial

from django.conf import settings
from django.utils import timezone

from observability import context
from payments.models import UNSETTLED_REFUND_STATUSES, Refund, RefundAttemptStatus
from payments.orphans import orphan_refund_cancel, orphan_refund_find_late, orphan_refund_start
from payments.providers import PaymentProvider, ProviderOutcomeUnknown, get_provider
from payments.refunds import refund_send, refund_settle
from payments.services import Settlement
from reconcile.desk.isolation import ORPHAN_REFUNDS, REFUNDS, FailureIsolation
from reconcile.recovery.claims import claim_due, hand_back, reconcile_backoff_s, retry_later
from reconcile.recovery.completion import complete_requests_for
from reconcile.selectors import REFUND_RESOURCE, payments_orphaned_without_refund

logger = logging.getLogger(__name__)

# Refund attempts per claim: the same reasoning as payments.BATCH_SIZE.
BATCH_SIZE = 50
# The pass budget's clock (a module attribute, so a test can make time run out).
_monotonic = time.monotonic


class RefundResolution(enum.Enum):
    """What reconciling one refund attempt did."""

    REFUNDED = "refunded"  # the provider refunded it: SUCCEEDED
    DECLINED = "declined"  # the provider refused it: FAILED
    # An orphan refund not sent yet, whose capture an earlier attempt refunded late:
    # FAILED without sending (payments.orphans.orphan_refund_cancel)
    SUPERSEDED = "superseded"
    ALREADY_SETTLED = "already_settled"  # a notification or a client retry was first
    UNREACHABLE = "unreachable"  # no answer from the provider: backoff, nothing guessed
    CONFLICT = "conflict"  # the provider contradicts our books: left for a human (audit)
    ERROR = "error"  # a bug or a database failure: logged, retried after a backoff


SETTLED = frozenset(
    r.value
    for r in (
        RefundResolution.REFUNDED,
        RefundResolution.DECLINED,
        RefundResolution.SUPERSEDED,
        RefundResolution.ALREADY_SETTLED,
    )
)


@dataclass(frozen=True)
class RefundReconcileCounts:
    """What one pass did, by outcome (``restarted``: orphan refunds started anew)."""

    restarted: int = 0
    claimed: int = 0
    refunded: int = 0
    declined: int = 0
    superseded: int = 0
    already_settled: int = 0
    unreachable: int = 0
    conflict: int = 0
    error: int = 0
    completed: int = 0
    handed_back: int = 0


def refund_reconcile(*, refund: Refund, provider: PaymentProvider) -> RefundResolution:
    """Settle one unsettled refund attempt from the provider's account of it."""
    try:
        account = provider.query_refund(out_refund_no=refund.refund_no)
        orphan = refund.order_id is None
        if account is None and orphan and _superseded(refund=refund, provider=provider):
            # The provider never got it, and an earlier attempt of the same orphaned
            # capture was carried out late meanwhile: not sent, ever.
            return RefundResolution.SUPERSEDED
        if account is None:
            # See the module docstring: sending again with the same derived key is a
            # replay at the provider if an earlier send got there after all.
            account = refund_send(refund=refund, provider=provider)
    except ProviderOutcomeUnknown as error:
        logger.warning("refund %s: provider unreachable (%s); backing off", refund.pk, error)
        _retry_later(refund=refund)
        return RefundResolution.UNREACHABLE
    settled = refund_settle(refund_attempt_id=refund.pk, result=account)
    match settled.outcome:
        case Settlement.APPLIED if settled.refund.status == RefundAttemptStatus.SUCCEEDED:
            return RefundResolution.REFUNDED
        case Settlement.APPLIED:
            return RefundResolution.DECLINED
        case Settlement.ALREADY_APPLIED:
            return RefundResolution.ALREADY_SETTLED
        case Settlement.CONFLICT:
            _retry_later(refund=refund)
            return RefundResolution.CONFLICT
    raise AssertionError(f"unexpected settlement {settled.outcome}")  # pragma: no cover


def _superseded(*, refund: Refund, provider: PaymentProvider) -> bool:
    """Right before attempt n of an orphaned capture's refund is sent: ask the
    provider about the earlier, declined attempts (one may have been carried out
    since attempt n started, and nobody told us: a dropped notification, no
    statement yet); book one it carried out, and cancel attempt n. True if cancelled.

    Asked here and not only when attempt n started, because n waits out a backoff
    between the two. Raises ProviderOutcomeUnknown (nothing is sent then either).
    """
    earlier = Refund.objects.filter(
        payment_id=refund.payment_id,
        order__isnull=True,
        status=RefundAttemptStatus.FAILED,
        pk__lt=refund.pk,
    ).order_by("-pk")
    orphan_refund_find_late(refunds=earlier, provider=provider)
    # Whoever booked it (here, a notification, a statement, another runner): the
    # cancel checks under the order's lock that an earlier attempt SUCCEEDED.
    return orphan_refund_cancel(refund_attempt_id=refund.pk)


def _retry_later(*, refund: Refund) -> None:
    retry_later(Refund, row=refund, statuses=UNSETTLED_REFUND_STATUSES, now=timezone.now())


@context.isolated
def _reconcile_isolated(
    *, refund: Refund, provider: PaymentProvider, isolation: FailureIsolation
) -> RefundResolution:
    # One attempt's bug must not stop the others: counted, logged, and backed off.
    # The refund's and its charge's references go on every line about this attempt.
    context.bind(out_refund_no=refund.refund_no, out_trade_no=refund.payment.out_trade_no)
    resolution = isolation.run(
        key=refund.pk,
        reference=refund.refund_no,
        work=partial(refund_reconcile, refund=refund, provider=provider),
        failed=RefundResolution.ERROR,
        on_failure=partial(_retry_later, refund=refund),
    )
    if resolution is not RefundResolution.ERROR:
        logger.info("refund %s reconciled: %s", refund.pk, resolution.value)
    return resolution


def _orphan_refunds_restart(*, provider: PaymentProvider) -> tuple[int, int]:
    """Start the next refund of every orphaned capture due for one: (started, failed)."""
    isolation = FailureIsolation(job=ORPHAN_REFUNDS, subject_type="payment")
    started = 0
    for payment_id in payments_orphaned_without_refund():
        if not isolation.due(payment_id):
            continue
        refund = isolation.run(
            key=payment_id,
            reference=str(payment_id),
            work=partial(
                orphan_refund_start,
                payment_id=payment_id,
                retry_delay_s=reconcile_backoff_s,
                provider=provider,
            ),
            failed=None,
        )
        started += refund is not None
    return started, isolation.failed


def run_once(
    *,
    provider: PaymentProvider | None = None,
    batch_size: int = BATCH_SIZE,
    budget_s: float | None = None,
) -> RefundReconcileCounts:
    """Restart declined orphan refunds, then reconcile every due refund attempt."""
    provider = provider or get_provider()
    restarted, restart_failed = _orphan_refunds_restart(provider=provider)
    deadline = _monotonic() + (settings.RECONCILE_PASS_BUDGET_S if budget_s is None else budget_s)
    isolation = FailureIsolation(job=REFUNDS, subject_type="refund")
    counts: Counter[str] = Counter()
    while _monotonic() < deadline:
        batch = claim_due(
            Refund, statuses=UNSETTLED_REFUND_STATUSES, now=timezone.now(), limit=batch_size
        )
        if not batch:
            break
        counts["claimed"] += len(batch)
        settled = []
        for index, refund in enumerate(batch):
            if _monotonic() >= deadline:
                # Out of time: the rest is handed back, due again at once.
                counts["handed_back"] += hand_back(Refund, rows=batch[index:])
                break
            resolution = _reconcile_isolated(refund=refund, provider=provider, isolation=isolation)
            counts[resolution.value] += 1
            if resolution.value in SETTLED:
                settled.append(refund.pk)
        counts["completed"] += complete_requests_for(
            resource_type=REFUND_RESOURCE, ids=settled, provider=provider
        )
    counts["error"] += restart_failed
    return RefundReconcileCounts(restarted=restarted, **counts)
