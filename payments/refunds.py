"""Writes of refunds: start a refund attempt, and settle it from what the provider says.

The mirror image of ``payments.services``. ``refund_settle`` is the one way a
refund becomes SUCCEEDED or FAILED: the refund flow (synchronous answer), the
callback endpoint (refund notification) and the reconciler (``query_refund``)
all call it, so whichever arrives first settles the attempt and the others
find it settled and change nothing.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, replace
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils import timezone

from orders.models import Order
from orders.services import violated_constraint
from payments.disputes import payment_disputed
from payments.errors import OrderNotRefundable, RefundExceedsPaid, RefundKeyReused
from payments.locks import lock_order_and_refund, orders_to_lock
from payments.models import (
    UNSETTLED_REFUND_STATUSES,
    LedgerEntry,
    Payment,
    PaymentStatus,
    Refund,
    RefundAttemptStatus,
)
from payments.providers import PaymentProvider, ProviderRejected, RefundResult, RefundStatus
from payments.reversals import ReversalConflict, refund_reverse
from payments.services import Settlement

logger = logging.getLogger(__name__)


# The failure code's prefix of a refund the provider refused as a request (a 4xx):
# nothing was refunded, and nothing is there to be carried out later.
REJECTED_PREFIX = "rejected-"


def _new_refund_no() -> str:
    # 64 random bits, like out_trade_no: unguessable, and unique by constraint anyway.
    return f"R{timezone.now():%Y%m%d}{secrets.token_hex(8).upper()}"


def refund_provider_key(refund: Refund) -> str:
    """The key we send the provider: derived from the refund attempt, so every retry
    of it (client retry, resume, reconciler) is a replay there, never a second refund."""
    return f"onceshop-{refund.refund_no}"


@dataclass(frozen=True)
class RefundRequest:
    """What a caller asked for: whose request, which order, how much (None: all the rest)."""

    user_id: int
    is_staff: bool
    order_number: str
    amount: int | None
    reason: str


def refund_create(
    *,
    user_id: int,
    is_staff: bool,
    order_number: str,
    amount: int | None,
    reason: str,
    idempotency_key: str | None = None,
) -> Refund:
    """Start a refund attempt of a PAID order (phase one of the refund flow).

    ``amount`` None means the whole refundable rest. The order's owner or staff only.
    ``idempotency_key``: the request's key; a key that already started a refund of
    this order (its record reaped since) is ``RefundKeyReused``, never a second refund.
    """
    with transaction.atomic():
        # The order row lock first, like every writer of an order and its money: a
        # settlement cannot change refunded_amount between our check and our insert.
        orders = orders_to_lock()
        order = get_object_or_404(
            orders if is_staff else orders.filter(user_id=user_id), number=order_number
        )
        # Asked first, whatever the order's state now: the key's answer is "used",
        # not whatever a new request would get. The unique (order, key) index below
        # decides should this read ever miss one (it cannot under the order's lock).
        if (
            idempotency_key is not None
            and Refund.objects.filter(order=order, idempotency_key=idempotency_key).exists()
        ):
            raise RefundKeyReused(order=order.number)
        if order.status != Order.Status.PAID:
            raise OrderNotRefundable(f"The order is {order.status.lower()}.")
        rest = order.amount - order.refunded_amount
        amount = rest if amount is None else amount
        if amount > rest:
            raise RefundExceedsPaid(
                f"At most {rest} {order.currency} is left to refund.", refundable=rest
            )
        capture = Payment.objects.get(order=order, status=PaymentStatus.SUCCEEDED)
        if payment_disputed(payment_id=capture.pk):
            # The dispute decides where this money goes (payments.disputes).
            raise OrderNotRefundable("The payment is disputed.")
        try:
            with transaction.atomic():
                return Refund.objects.create(
                    order=order,
                    payment=capture,
                    refund_no=_new_refund_no(),
                    amount=amount,
                    currency=order.currency,
                    reason=reason,
                    idempotency_key=idempotency_key,
                )
        except IntegrityError as error:
            if violated_constraint(error) == "refund_one_per_order_key":
                raise RefundKeyReused(order=order.number) from error
            # The partial unique index: another refund of this order is in flight.
            # Its amount is not counted yet, so two could otherwise both fit the rest.
            raise OrderNotRefundable("A refund of this order is in progress.") from error


def refund_mark_unknown(*, refund_attempt_id: int) -> bool:
    """PENDING -> UNKNOWN after a timeout or provider error; the reconciler takes it."""
    return bool(
        Refund.objects.filter(pk=refund_attempt_id, status=RefundAttemptStatus.PENDING).update(
            status=RefundAttemptStatus.UNKNOWN, updated_at=timezone.now()
        )
    )


def refund_send(*, refund: Refund, provider: PaymentProvider) -> RefundResult:
    """Ask the provider to refund the attempt, with its derived key. Outside any transaction.

    Raises ProviderOutcomeUnknown. A 4xx (ProviderRejected: the provider refused
    the request as such, e.g. more than the charge has left there) means nothing
    was refunded: answered as a decline, final like one.
    """
    try:
        return provider.refund(
            out_refund_no=refund.refund_no,
            out_trade_no=refund.payment.out_trade_no,
            amount=refund.amount,
            notify_url=settings.SHOP_BASE_URL + reverse(provider.callback_route),
            idempotency_key=refund_provider_key(refund),
        )
    except ProviderRejected as error:
        return _rejected(refund=refund, code=error.code or f"http-{error.status}")


def _rejected(*, refund: Refund, code: str) -> RefundResult:
    return RefundResult(
        out_refund_no=refund.refund_no,
        out_trade_no=refund.payment.out_trade_no,
        status=RefundStatus.DECLINED,
        refund_id=None,
        amount=None,
        currency=None,
        decline_reason=f"{REJECTED_PREFIX}{code}"[:64],
    )


@dataclass(frozen=True)
class RefundSettleResult:
    outcome: Settlement
    refund: Refund
    reason: str = ""


class _Conflict(Exception):
    """The provider's account contradicts ours: roll the settlement back, report it."""


def refund_settle(
    *, refund_attempt_id: int, result: RefundResult, confirmed: bool = False
) -> RefundSettleResult:
    """Apply the provider's account of a refund attempt, once.

    In one transaction, each write conditional on the state we expect: the
    refund (PENDING/UNKNOWN -> SUCCEEDED/FAILED), its ledger entry, the order's
    ``refunded_amount`` (``+ x`` only while it stays within the amount) and
    PAID -> REFUNDED once the whole amount is back.

    ``confirmed``: ``result`` is the provider's query answer (the truth), so a
    success may also settle a refund we had settled FAILED (a refund declined
    now that went through later, like a late charge): the money did go back,
    and the books must say so. A notification never passes it.

    REVERSED (it succeeded, then failed at the provider) is booked only when
    ``confirmed`` (``payments.reversals``): a refund not settled yet is booked as
    the success it was first, then reversed, in the same transaction. From a
    notification it is a conflict: the reconciler asks the provider.
    """
    try:
        with transaction.atomic():
            if result.status is RefundStatus.REVERSED:
                return _settle_reversed(
                    refund_attempt_id=refund_attempt_id, result=result, confirmed=confirmed
                )
            return _settle(refund_attempt_id=refund_attempt_id, result=result, confirmed=confirmed)
    except (_Conflict, ReversalConflict, IntegrityError) as conflict:
        # IntegrityError: a unique index refused a second success of the same money
        # (another attempt of an orphaned capture, the provider's refund_id booked
        # already) — the provider would have refunded it twice: for a person.
        reason = str(conflict)
        logger.error("refund %s: provider result not applied: %s", refund_attempt_id, reason)
        return RefundSettleResult(
            Settlement.CONFLICT, Refund.objects.get(pk=refund_attempt_id), reason
        )


def _settle(*, refund_attempt_id: int, result: RefundResult, confirmed: bool) -> RefundSettleResult:
    order, refund = lock_order_and_refund(refund_attempt_id=refund_attempt_id)
    if result.out_refund_no != refund.refund_no:
        raise _Conflict(f"answer names refund {result.out_refund_no}, not {refund.refund_no}")
    now = timezone.now()
    changes: dict[str, object]
    if result.status is RefundStatus.SUCCESS:
        if (result.amount, result.currency) != (refund.amount, refund.currency):
            raise _Conflict(
                f"provider refunded {result.amount} {result.currency}, "
                f"attempt is for {refund.amount} {refund.currency}"
            )
        target = RefundAttemptStatus.SUCCEEDED
        changes = {"status": target, "refund_id": result.refund_id, "settled_at": now}
        sources = [*UNSETTLED_REFUND_STATUSES, *([RefundAttemptStatus.FAILED] if confirmed else [])]
    else:
        target = RefundAttemptStatus.FAILED
        changes = {
            "status": target,
            "failure_code": result.decline_reason or "declined",
            "settled_at": now,
        }
        sources = list(UNSETTLED_REFUND_STATUSES)

    moved = Refund.objects.filter(pk=refund_attempt_id, status__in=sources).update(
        updated_at=now, **changes
    )
    if not moved:
        refund.refresh_from_db()
        if refund.status == target and (
            target == RefundAttemptStatus.FAILED or refund.refund_id == result.refund_id
        ):
            return RefundSettleResult(Settlement.ALREADY_APPLIED, refund)
        raise _Conflict(f"refund is {refund.status}, provider says {result.status}")

    if target == RefundAttemptStatus.SUCCEEDED:
        assert result.refund_id is not None
        # Unique per refund attempt and per provider refund: never booked twice.
        LedgerEntry.objects.create(
            kind=LedgerEntry.Kind.REFUND if refund.order_id else LedgerEntry.Kind.ORPHAN_REFUND,
            order_id=refund.payment.order_id,
            payment_id=refund.payment_id,
            refund_attempt=refund,
            trade_no=refund.payment.trade_no or "",
            refund_id=result.refund_id,
            amount=refund.amount,
            currency=refund.currency,
        )
        if refund.order_id is not None:  # an orphaned capture's refund is not the order's
            _count_refund(order=order, amount=refund.amount)
        else:
            _hasten_superseded(refund=refund, now=now)
    for name, value in changes.items():
        setattr(refund, name, value)
    return RefundSettleResult(Settlement.APPLIED, refund)


def _settle_reversed(
    *, refund_attempt_id: int, result: RefundResult, confirmed: bool
) -> RefundSettleResult:
    """The provider says the refund succeeded and was then reversed (see refund_settle)."""
    if not confirmed:
        raise _Conflict("the provider says the refund was reversed: asking it")
    order, refund = lock_order_and_refund(refund_attempt_id=refund_attempt_id)
    if refund.status == RefundAttemptStatus.REVERSED:
        return RefundSettleResult(Settlement.ALREADY_APPLIED, refund)
    if refund.status != RefundAttemptStatus.SUCCEEDED:
        # Never booked as a success (we did not know, or it was declined, then carried
        # out late, then reversed): it was one, so it is booked as one first.
        _settle(
            refund_attempt_id=refund_attempt_id,
            result=replace(result, status=RefundStatus.SUCCESS),
            confirmed=True,
        )
        order, refund = lock_order_and_refund(refund_attempt_id=refund_attempt_id)
    reversed_now = refund_reverse(
        order=order,
        refund=refund,
        reason=result.decline_reason or "reversed",
        now=timezone.now(),
    )
    return RefundSettleResult(
        Settlement.APPLIED if reversed_now else Settlement.ALREADY_APPLIED, refund
    )


def _hasten_superseded(*, refund: Refund, now: datetime) -> None:
    """An orphaned capture's refund succeeded (maybe late, a declined one carried out
    after all): any later attempt of it still unsettled is due now, not after its
    backoff, so the reconciler cancels it before it is sent, or settles its
    harmless decline (``orphans.orphan_refund_cancel``)."""
    Refund.objects.filter(
        payment_id=refund.payment_id, order__isnull=True, status__in=UNSETTLED_REFUND_STATUSES
    ).exclude(pk=refund.pk).update(next_reconcile_at=now)


def _count_refund(*, order: Order, amount: int) -> None:
    """``refunded_amount += amount`` within the amount, then PAID -> REFUNDED if all is back.

    Never read-modify-written in Python: PostgreSQL evaluates the condition under
    the row lock, and the CHECK constraint would refuse an overshoot anyway.
    """
    grew = Order.objects.filter(pk=order.pk, refunded_amount__lte=F("amount") - amount).update(
        refunded_amount=F("refunded_amount") + amount
    )
    if not grew:
        raise _Conflict(f"order {order.number}: a refund of {amount} exceeds its capture")
    order.refresh_from_db(fields=["refunded_amount"])
    if order.refunded_amount < order.amount:
        return  # a partial refund leaves the order PAID
    # PAID -> REFUNDED, conditional: only a PAID order whose whole amount is back.
    refunded = Order.objects.filter(
        pk=order.pk, status=Order.Status.PAID, refunded_amount=F("amount")
    ).update(status=Order.Status.REFUNDED)
    if refunded != 1:
        raise _Conflict(f"order {order.number} is {order.status}, cannot become REFUNDED")
