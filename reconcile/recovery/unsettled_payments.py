"""Resolve payment attempts whose outcome is unknown, by asking the provider.

An attempt is unsettled (PENDING or UNKNOWN) while we do not know whether the
provider charged it: the request timed out, the provider answered 5xx, or the
process died between phases. Once it is older than RECONCILE_AFTER_S, nobody is
waiting on the provider for it any more, and the reconciler finds out. The
decision for one attempt is ``payment_reconcile``, read top to bottom:

    query(out_trade_no)
      waiting for the customer (3-D Secure) ->
                  younger than PAYMENT_ACTION_TIMEOUT_S: leave it, due again then;
                  older: fence it like "nothing" (the customer had their time)
      unreachable -> leave it as it is; try again after a backoff
      nothing  -> fence: close(out_trade_no) FIRST, then settle with what close says
      SUCCESS  -> roll forward: payment_settle (PAID, ledger entry, shipment)
      DECLINED -> roll back: payment_settle (FAILED, declined)
      CLOSED   -> roll back: fenced (by us, or by an earlier pass that died before settling)

The fence is what makes "no charge" final: without it, a charge still on its
way (a retry, a slow provider) could succeed after we marked the attempt
FAILED, and the customer would pay for an order we let them pay again.

A success the shop cannot apply (the attempt was failed or fenced, the order
is paid by another attempt, cancelled, expired or refunded, or the provider
captured another amount) goes to ``payments.orphans.capture_orphan_resolve``:
rolled forward if the order can still take it, otherwise booked as an
orphaned capture and refunded (``unsettled_refunds.py`` drives that refund).

Then the request that made the attempt is finished through the completer (the
answer the pay flow's last phase would store, as a client retry would), so the
customer's retry with the same key replays the final answer: 200 with the
order, or 402 ``payment-failed``.

A pass (``reconcile_due``) claims the due attempts a batch at a time and
reconciles each one in turn with ``payment_reconcile``, then finishes the
requests behind the settled ones. The reconcile job (``run_once``) runs the
pass the setting RECONCILE_PAYMENT_PASS names: this one when none is named;
the shipped settings name a faster one, which must write the same rows
(docs/configuration.md).

Claiming, leases and backoff: ``claims.py``, shared with refunds.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from observability import context
from payments.models import UNSETTLED_STATUSES, Payment, PaymentStatus
from payments.orphans import OrphanOutcome, capture_orphan_resolve
from payments.providers import (
    ChargeResult,
    ChargeStatus,
    CustomerActionRequired,
    PaymentProvider,
    ProviderOutcomeUnknown,
    get_provider,
)
from payments.services import Settlement, payment_mark_action_required, payment_settle
from reconcile.desk.isolation import PAYMENTS, FailureIsolation
from reconcile.recovery.claims import claim_due, hand_back, retry_later
from reconcile.recovery.completion import complete_requests_for
from reconcile.selectors import PAYMENT_RESOURCE

logger = logging.getLogger(__name__)

# Attempts per claim. Each costs one or two provider calls (tens of ms when the
# provider is healthy, PROVIDER_TIMEOUT_S when it hangs): 50 keeps a batch short
# enough that its lease (RECONCILE_LEASE_S) covers it even when the provider is
# slow, and large enough that claiming costs one statement per 50 attempts.
BATCH_SIZE = 50
# The pass budget's clock (a module attribute, so a test can make time run out).
_monotonic = time.monotonic


class Resolution(enum.Enum):
    """What reconciling one attempt did."""

    ROLLED_FORWARD = "rolled_forward"  # the provider charged: SUCCEEDED, order PAID
    ROLLED_BACK = "rolled_back"  # declined, or fenced with no charge: FAILED
    ALREADY_SETTLED = "already_settled"  # a callback or a client retry settled it first
    UNREACHABLE = "unreachable"  # no answer from the provider: backoff, nothing guessed
    # The provider waits for the customer: left alone until PAYMENT_ACTION_TIMEOUT_S.
    AWAITING_CUSTOMER = "awaiting_customer"
    # Captured, but the order could not take it: booked and being refunded.
    ORPHANED = "orphaned"
    CONFLICT = "conflict"  # the provider contradicts our books: left for a human (audit)
    ERROR = "error"  # a bug or a database failure: logged, retried after a backoff


# After these the attempt is final, and the request that made it can be finished.
SETTLED = frozenset(
    r.value
    for r in (
        Resolution.ROLLED_FORWARD,
        Resolution.ROLLED_BACK,
        Resolution.ALREADY_SETTLED,
        Resolution.ORPHANED,
    )
)


@dataclass(frozen=True)
class ReconcileCounts:
    """What one pass did, by outcome (``completed``: requests finished afterwards)."""

    claimed: int = 0
    rolled_forward: int = 0
    rolled_back: int = 0
    already_settled: int = 0
    orphaned: int = 0
    unreachable: int = 0
    awaiting_customer: int = 0
    conflict: int = 0
    error: int = 0
    completed: int = 0
    handed_back: int = 0  # claimed, but the pass ran out of time first: released


def payment_reconcile(*, payment: Payment, provider: PaymentProvider) -> Resolution:
    """Settle one unsettled attempt from the provider's account of it (see the module doc).

    Called outside any transaction: the provider calls must not hold row locks.
    """
    # Ask the provider. A read, safe to repeat: we act on its answer, never on a guess.
    try:
        account = provider.query(out_trade_no=payment.out_trade_no)
    except CustomerActionRequired:
        if timezone.now() < action_deadline(payment):
            # The customer still has time. Not a failure to back off from: marked (the
            # audit counts it in flight, a retry asks before it charges), and due again
            # exactly when the customer's time is up.
            payment_mark_action_required(payment_id=payment.pk)
            Payment.objects.filter(pk=payment.pk, status__in=UNSETTLED_STATUSES).update(
                next_reconcile_at=action_deadline(payment)
            )
            return Resolution.AWAITING_CUSTOMER
        # The customer had their time: fence it like an attempt the provider never saw
        # (if they completed it meanwhile, close answers the capture, rolled forward).
        account = None
    except ProviderOutcomeUnknown as error:
        return _unreachable(payment=payment, error=error)

    if account is None:
        # The provider never saw it: fence before failing it. After close, no charge
        # for this attempt can succeed, so FAILED is final. If a charge got in first,
        # close answers SUCCESS, and the attempt is rolled forward below.
        try:
            account = provider.close(out_trade_no=payment.out_trade_no)
        except ProviderOutcomeUnknown as error:
            return _unreachable(payment=payment, error=error)

    # Roll forward or back. The settlement is conditional on the attempt being
    # unsettled and the order UNPAID, so a callback or a retry that settled it first
    # wins, and it is settled once.
    settled = payment_settle(payment_id=payment.pk, result=account)
    match settled.outcome:
        case Settlement.APPLIED if settled.payment.status == PaymentStatus.SUCCEEDED:
            return Resolution.ROLLED_FORWARD  # SUCCESS: order PAID, ledger entry, shipment
        case Settlement.APPLIED:
            return Resolution.ROLLED_BACK  # DECLINED or CLOSED: FAILED
        case Settlement.ALREADY_APPLIED:
            return Resolution.ALREADY_SETTLED
        case Settlement.CONFLICT if account.status is ChargeStatus.SUCCESS:
            # Captured, but not a success this attempt can take: rolled forward if the
            # order can still take it, otherwise booked as orphaned and refunded.
            resolution = _ORPHAN_RESOLUTIONS[
                capture_orphan_resolve(payment_id=payment.pk, capture=account)
            ]
        case Settlement.CONFLICT:
            resolution = Resolution.CONFLICT
        case _:  # pragma: no cover
            raise AssertionError(f"unexpected settlement {settled.outcome}")
    if resolution is Resolution.CONFLICT:
        # The provider contradicts our books: nothing changed, logged. Asking again at
        # backoff pace costs little and notices if the provider corrects itself.
        _retry_later(payment=payment, now=timezone.now())
    return resolution


def action_deadline(payment: Payment) -> datetime:
    """When an attempt waiting for its customer is fenced: PAYMENT_ACTION_TIMEOUT_S after
    it started (its pay asked the provider within the same request)."""
    return payment.created_at + timedelta(seconds=settings.PAYMENT_ACTION_TIMEOUT_S)


def _unreachable(*, payment: Payment, error: ProviderOutcomeUnknown) -> Resolution:
    logger.warning("payment %s: provider unreachable (%s); backing off", payment.pk, error)
    _retry_later(payment=payment, now=timezone.now())  # counted from after the question
    return Resolution.UNREACHABLE


def _retry_later(*, payment: Payment, now: datetime) -> None:
    retry_later(Payment, row=payment, statuses=UNSETTLED_STATUSES, now=now)


_ORPHAN_RESOLUTIONS = {
    OrphanOutcome.ROLLED_FORWARD: Resolution.ROLLED_FORWARD,
    OrphanOutcome.ORPHANED: Resolution.ORPHANED,
    OrphanOutcome.ALREADY_RESOLVED: Resolution.ALREADY_SETTLED,
    OrphanOutcome.CONFLICT: Resolution.CONFLICT,
}


def payment_settle_from_account(*, payment_id: int, account: ChargeResult) -> Resolution:
    """Settle an attempt from an account of it the caller already holds (a notification's
    query, a statement line): ``payment_reconcile``'s roll forward or back, without its
    question, fence or backoff."""
    settled = payment_settle(payment_id=payment_id, result=account)
    match settled.outcome:
        case Settlement.APPLIED if settled.payment.status == PaymentStatus.SUCCEEDED:
            return Resolution.ROLLED_FORWARD
        case Settlement.APPLIED:
            return Resolution.ROLLED_BACK
        case Settlement.ALREADY_APPLIED:
            return Resolution.ALREADY_SETTLED
        case Settlement.CONFLICT if account.status is ChargeStatus.SUCCESS:
            return _ORPHAN_RESOLUTIONS[
                capture_orphan_resolve(payment_id=payment_id, capture=account)
            ]
        case Settlement.CONFLICT:
            return Resolution.CONFLICT
    raise AssertionError(f"unexpected settlement {settled.outcome}")  # pragma: no cover


# --- The pass: every due attempt, one at a time ---------------------------------------------


def reconcile_due(
    *, provider: PaymentProvider, batch_size: int = BATCH_SIZE, budget_s: float | None = None
) -> ReconcileCounts:
    """Claim the due attempts a batch at a time and ``payment_reconcile`` each one, until
    none is due or the pass's time is up; then finish the requests behind the settled
    ones. Claimed attempts the pass has no time left for are handed back, due at once."""
    deadline = _monotonic() + (settings.RECONCILE_PASS_BUDGET_S if budget_s is None else budget_s)
    isolation = FailureIsolation(job=PAYMENTS, subject_type="payment")
    counts: Counter[str] = Counter()
    while _monotonic() < deadline:
        batch = claim_due(
            Payment, statuses=UNSETTLED_STATUSES, now=timezone.now(), limit=batch_size
        )
        if not batch:
            break
        counts["claimed"] += len(batch)
        settled = []
        for index, payment in enumerate(batch):
            if _monotonic() >= deadline:
                # Out of time: the rest is handed back, due again at once.
                counts["handed_back"] += hand_back(Payment, rows=batch[index:])
                break
            resolution = payment_reconcile_isolated(
                payment=payment, provider=provider, isolation=isolation
            )
            counts[resolution.value] += 1
            if resolution.value in SETTLED:
                settled.append(payment.pk)
        counts["completed"] += complete_requests_for(
            resource_type=PAYMENT_RESOURCE, ids=settled, provider=provider
        )
    return ReconcileCounts(**counts)


@context.isolated
def payment_reconcile_isolated(
    *, payment: Payment, provider: PaymentProvider, isolation: FailureIsolation
) -> Resolution:
    """``payment_reconcile``, its failure isolated: one attempt's bug or database hiccup
    is logged and counted, and the attempt backs off like one whose provider was
    unreachable (its claim's own backoff), so it cannot spin in a hot loop; the pass
    goes on with the others."""
    context.bind(out_trade_no=payment.out_trade_no)  # on every line about this attempt
    resolution = isolation.run(
        key=payment.pk,
        reference=payment.out_trade_no,
        work=partial(payment_reconcile, payment=payment, provider=provider),
        failed=Resolution.ERROR,
        on_failure=partial(_back_off, payment=payment),
    )
    if resolution is not Resolution.ERROR:
        logger.info("payment %s reconciled: %s", payment.pk, resolution.value)
    return resolution


def _back_off(*, payment: Payment) -> None:
    _retry_later(payment=payment, now=timezone.now())


def run_once(
    *,
    provider: PaymentProvider | None = None,
    batch_size: int = BATCH_SIZE,
    budget_s: float | None = None,
) -> ReconcileCounts:
    """The reconcile job's pass over due attempts: the one RECONCILE_PAYMENT_PASS names.

    ``reconcile_due`` above unless a deployment names another, which must take the
    same arguments and write the same rows (docs/configuration.md).
    """
    run_pass = import_string(
        getattr(
            settings,
            "RECONCILE_PAYMENT_PASS",
            "reconcile.recovery.unsettled_payments.reconcile_due",
        )
    )
    return run_pass(
        provider=provider or get_provider(),
        batch_size=batch_size,
        budget_s=settings.RECONCILE_PASS_BUDGET_S if budget_s is None else budget_s,
    )


# --- Asking ahead: the question alone, before anything is written --------------------------

# What asking the provider ahead about an attempt gave: its account, or the error
# raised instead.
Answer = ChargeResult | Exception


@context.isolated
def payment_ask(payment: Payment, provider: PaymentProvider) -> ChargeResult:
    """``payment_reconcile``'s question, asked ahead: the query, and the fence for an
    attempt the provider never saw or whose customer had their time. HTTP only, no
    database, so it can run in a thread of its own (the attempt is bound here: a thread
    starts with no log context). The desk asks with it before it changes anything.
    Raises what the query raises otherwise: nothing is guessed."""
    context.bind(out_trade_no=payment.out_trade_no)
    try:
        account = provider.query(out_trade_no=payment.out_trade_no)
    except CustomerActionRequired:
        if timezone.now() < action_deadline(payment):
            raise  # the customer still has time
        account = None  # they had their time: fenced like an attempt never seen
    if account is None:
        return provider.close(out_trade_no=payment.out_trade_no)
    return account


class AskedAhead:
    """The provider, with one attempt's question already answered by ``payment_ask``:
    ``payment_reconcile`` decides on that answer instead of asking again, and anything
    further it needs (a fence, should the customer's time run out in between) goes to
    the provider."""

    def __init__(self, provider: PaymentProvider, answer: Answer) -> None:
        self.provider, self.answer = provider, answer

    def query(self, *, out_trade_no: str, trade_no: str | None = None) -> ChargeResult:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.provider, name)
