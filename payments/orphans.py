"""Orphaned captures: money the provider captured that the order cannot take.

A real provider settles late, twice, or differently: an asynchronous method
declined now succeeds later; a charge succeeds for an attempt we already
failed or fenced, or for an order that another attempt paid, or that was
cancelled, expired or refunded meanwhile; or it captured another amount than
the attempt asked for. The customer's money is gone either way, so it is
never acknowledged and forgotten. ``capture_orphan_resolve`` is where every
path leads — the synchronous pay answer (the pay flow), the reconciler's
query, and (through the reconciler) a notification the shop could not apply:

- the order is still UNPAID and no other attempt of it is live, and the amount
  is the attempt's: roll forward (the attempt becomes SUCCEEDED, the order
  PAID). This is the one way out of FAILED;
- otherwise the attempt ends ORPHANED (neither live nor SUCCEEDED), the capture
  is booked as an ``orphan_capture`` ledger entry, and a refund of it is
  started (reason ``orphaned-capture``, reference and provider key derived
  from the attempt). The reconciler drives that refund until it succeeds. The
  order is not touched, and its totals never count any of it.

The caller passes the provider's *query* answer (or its synchronous charge
answer): the truth about the charge. A notification alone never gets here —
it could be stale, duplicated or mistaken, and a refund is money moving.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from orders.models import Order
from payments.disputes import payment_disputed
from payments.locks import lock_order_and_payment, lock_order_and_refund
from payments.models import (
    LIVE_STATUSES,
    ORPHANED_CAPTURE_REASON,
    UNSETTLED_REFUND_STATUSES,
    LedgerEntry,
    Payment,
    PaymentStatus,
    Refund,
    RefundAttemptStatus,
)
from payments.providers import (
    ChargeResult,
    ChargeStatus,
    PaymentProvider,
    ProviderOutcomeUnknown,
    RefundStatus,
    get_provider,
)
from payments.refunds import refund_settle
from payments.services import Settlement, payment_settle

logger = logging.getLogger(__name__)

# The failure code of a refund attempt cancelled before it was sent, because an
# earlier attempt of the same capture was carried out late (never sent twice).
SUPERSEDED = "superseded"
# Refund attempts that gave nothing back, after which the next one may start: a
# decline, and a refund that failed after it succeeded (payments/reversals.py).
_GAVE_NOTHING_BACK = (RefundAttemptStatus.FAILED, RefundAttemptStatus.REVERSED)


class OrphanOutcome(enum.Enum):
    """What ``capture_orphan_resolve`` did."""

    ROLLED_FORWARD = "rolled_forward"  # the order took the money: SUCCEEDED, PAID
    ORPHANED = "orphaned"  # booked as an orphaned capture; its refund is started
    ALREADY_RESOLVED = "already_resolved"  # booked before, one way or the other
    CONFLICT = "conflict"  # the answer is not a capture of this attempt: not applied


def capture_orphan_resolve(*, payment_id: int, capture: ChargeResult) -> OrphanOutcome:
    """Account for a capture the provider confirmed for this attempt, once (see the module)."""
    with transaction.atomic():
        order, payment = lock_order_and_payment(payment_id=payment_id)
        if (
            capture.status is not ChargeStatus.SUCCESS
            or capture.out_trade_no != payment.out_trade_no
            or not capture.trade_no
            or capture.amount is None
            or not capture.currency
        ):
            logger.error("payment %s: not a capture of this attempt: %s", payment_id, capture)
            return OrphanOutcome.CONFLICT
        if payment.status in (PaymentStatus.SUCCEEDED, PaymentStatus.ORPHANED):
            if payment.trade_no == capture.trade_no:
                return OrphanOutcome.ALREADY_RESOLVED
            logger.error(
                "payment %s is %s as %s, provider says %s",
                payment_id,
                payment.status,
                payment.trade_no,
                capture.trade_no,
            )
            return OrphanOutcome.CONFLICT
        why = _why_orphaned(order=order, payment=payment, capture=capture)
        if why is None:
            # The order can take it: the ordinary settlement, allowed out of FAILED
            # because this is the provider's own account of the charge.
            settled = payment_settle(payment_id=payment.pk, result=capture, confirmed=True)
            if settled.outcome is Settlement.APPLIED:
                return OrphanOutcome.ROLLED_FORWARD
            return OrphanOutcome.CONFLICT
        _book_orphan(payment=payment, capture=capture, why=why)
        return OrphanOutcome.ORPHANED


def _why_orphaned(*, order: Order, payment: Payment, capture: ChargeResult) -> str | None:
    """Why the order cannot take this capture, or None if it can."""
    if (capture.amount, capture.currency) != (payment.amount, payment.currency):
        return "captured-another-amount"
    if order.status != Order.Status.UNPAID:
        return f"order-{order.status.lower()}"
    live = Payment.objects.filter(order=order, status__in=LIVE_STATUSES).exclude(pk=payment.pk)
    if live.exists():
        return "order-has-another-live-attempt"
    return None


def _book_orphan(*, payment: Payment, capture: ChargeResult, why: str) -> None:
    now = timezone.now()
    moved = Payment.objects.filter(
        pk=payment.pk,
        status__in=[PaymentStatus.PENDING, PaymentStatus.UNKNOWN, PaymentStatus.FAILED],
    ).update(
        status=PaymentStatus.ORPHANED,
        trade_no=capture.trade_no,
        failure_code=why,
        settled_at=now,
        updated_at=now,
    )
    assert moved, "the attempt is locked and was checked above"
    assert capture.trade_no is not None
    assert capture.amount is not None
    assert capture.currency is not None
    # The provider's amount is what left the payer's wallet, so it is what we book
    # and what we give back, whatever the attempt asked for.
    LedgerEntry.objects.create(
        kind=LedgerEntry.Kind.ORPHAN_CAPTURE,
        order_id=payment.order_id,
        payment_id=payment.pk,
        trade_no=capture.trade_no,
        amount=capture.amount,
        currency=capture.currency,
    )
    logger.warning(
        "payment %s: orphaned capture %s of %s %s (%s); refunding it",
        payment.out_trade_no,
        capture.trade_no,
        capture.amount,
        capture.currency,
        why,
    )
    orphan_refund_start(payment_id=payment.pk)


def orphan_refund_start(
    *,
    payment_id: int,
    retry_delay_s: Callable[[int], float] | None = None,
    provider: PaymentProvider | None = None,
) -> Refund | None:
    """Start the next refund attempt of an orphaned capture, unless one is live or done.

    Its reference is derived from the attempt (``R<out_trade_no>-<n>``), so is its
    provider key: however often this runs, the provider refunds each at most
    once, and a partial unique index allows one attempt at a time. A declined one
    (FAILED) is final at the provider for its reference, so it is followed by
    attempt n + 1, by the reconciler, until one succeeds.

    Declined is final for the reference, not for the money: a provider may carry
    a declined refund out later. So before attempt n + 1 the provider is asked
    about every earlier reference (``orphan_refund_find_late``); one it carried
    out after all is booked, and no new attempt starts. An unreachable provider
    starts nothing either: the next pass asks again.

    ``retry_delay_s(declined)``: how long after the last decline the next attempt
    may be sent (the reconciler's backoff); it is created at once, live and
    counted, and claimed only then. None: due at once.
    """
    # Read without a lock (the provider is asked outside any transaction); the
    # locked transaction below checks again before it writes. Declined and reversed
    # attempts gave nothing back; any other is in flight or done.
    earlier = list(Refund.objects.filter(payment_id=payment_id, order__isnull=True))
    if any(refund.status not in _GAVE_NOTHING_BACK for refund in earlier):
        return None
    if earlier:
        try:
            if orphan_refund_find_late(refunds=earlier, provider=provider or get_provider()):
                return None
        except ProviderOutcomeUnknown as error:
            logger.warning(
                "payment %s: provider unreachable (%s): no refund yet", payment_id, error
            )
            return None
    with transaction.atomic():
        _, payment = lock_order_and_payment(payment_id=payment_id)
        if payment.status != PaymentStatus.ORPHANED:
            return None
        refunds = Refund.objects.filter(payment=payment, order__isnull=True)
        if refunds.exclude(status__in=_GAVE_NOTHING_BACK).exists():
            return None
        if payment_disputed(payment_id=payment.pk):
            return None  # a dispute decides where this money goes (payments/disputes.py)
        capture = LedgerEntry.objects.get(payment=payment, kind=LedgerEntry.Kind.ORPHAN_CAPTURE)
        declined = refunds.count()
        return Refund.objects.create(
            order=None,
            payment=payment,
            refund_no=orphan_refund_no(payment, declined + 1),
            amount=capture.amount,
            currency=capture.currency,
            reason=ORPHANED_CAPTURE_REASON,
            next_reconcile_at=_not_before(refunds, declined=declined, delay_s=retry_delay_s),
        )


def orphan_refund_no(payment: Payment, attempt: int) -> str:
    """Our reference for refund attempt ``attempt`` (1, 2, ...) of an orphaned capture:
    every reference one ever used is derivable from its attempt and the number."""
    return f"R{payment.out_trade_no}-{attempt}"


def orphan_refund_find_late(*, refunds: Iterable[Refund], provider: PaymentProvider) -> bool:
    """Ask the provider about each declined refund attempt; book one it carried out
    after all. True if one of them is (now) booked as the capture's refund.

    Raises ProviderOutcomeUnknown (nothing is guessed from silence).
    """
    for refund in refunds:
        if refund.status != RefundAttemptStatus.FAILED:
            continue
        account = provider.query_refund(out_refund_no=refund.refund_no)
        if account is None or account.status is not RefundStatus.SUCCESS:
            continue
        logger.warning("orphan refund %s: declined, then carried out late", refund.refund_no)
        settled = refund_settle(refund_attempt_id=refund.pk, result=account, confirmed=True)
        if settled.outcome in (Settlement.APPLIED, Settlement.ALREADY_APPLIED):
            return True
    return False


def orphan_refund_cancel(*, refund_attempt_id: int) -> bool:
    """Cancel an orphaned capture's refund attempt that the provider never received,
    because an earlier attempt was carried out late: FAILED (``superseded``), never sent.

    The caller asked the provider first (it holds no refund of this reference).
    Under the order's lock, which every settlement of a refund takes first: a
    late success booked by another runner is either seen here or comes after.
    Should a send of it still be under way somewhere, the provider declines it
    (the capture has nothing left to refund), which settles it the same way.
    """
    with transaction.atomic():
        _, refund = lock_order_and_refund(refund_attempt_id=refund_attempt_id)
        if refund.order_id is not None or refund.status not in UNSETTLED_REFUND_STATUSES:
            return False
        siblings = Refund.objects.filter(payment_id=refund.payment_id, order__isnull=True)
        if not siblings.filter(status=RefundAttemptStatus.SUCCEEDED).exists():
            return False
        now = timezone.now()
        Refund.objects.filter(pk=refund_attempt_id, status__in=UNSETTLED_REFUND_STATUSES).update(
            status=RefundAttemptStatus.FAILED,
            failure_code=SUPERSEDED,
            settled_at=now,
            updated_at=now,
        )
    logger.warning("orphan refund %s: superseded by a late success, not sent", refund.refund_no)
    return True


def _not_before(
    refunds: QuerySet[Refund], *, declined: int, delay_s: Callable[[int], float] | None
) -> datetime | None:
    """When the attempt after ``declined`` declined ones may be sent: the backoff counts
    from the last decline, not from whenever a pass noticed it."""
    if not declined or delay_s is None:
        return None
    last = refunds.order_by("-pk").values_list("settled_at", flat=True).first()
    return (last or timezone.now()) + timedelta(seconds=delay_s(declined))
