"""Writes of payments: start an attempt, and settle it from what the provider says.

``payment_settle`` is the one way a payment becomes SUCCEEDED or FAILED. The
pay flow (synchronous answer), the callback endpoint (notification) and the
reconciler (query) all call it, so whichever arrives first settles the attempt
and the others find it settled and change nothing.
"""

from __future__ import annotations

import enum
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.shortcuts import get_object_or_404
from django.utils import timezone

from orders.models import Order
from orders.tasks import fulfil_order, fulfil_orders
from payments.errors import OrderNotPayable
from payments.locks import lock_order_and_payment, orders_to_lock
from payments.models import (
    LIVE_STATUSES,
    UNSETTLED_STATUSES,
    LedgerEntry,
    Payment,
    PaymentStatus,
)
from payments.providers import ChargeResult, ChargeStatus

logger = logging.getLogger(__name__)

# What the attempt's failure_code says when reconciliation fenced it.
CLOSED_BY_RECONCILIATION = "closed"


def _new_out_trade_no() -> str:
    # 64 random bits: unguessable, and unique by constraint anyway.
    return f"P{timezone.now():%Y%m%d}{secrets.token_hex(8).upper()}"


def provider_idempotency_key(payment: Payment) -> str:
    """The key we send the provider: derived from the attempt, so every retry of
    the same attempt (client retry, resume, reconciler) is a replay there."""
    return f"onceshop-{payment.out_trade_no}"


def payment_create(*, user_id: int, order_number: str) -> Payment:
    """Start a payment attempt for the caller's UNPAID order (phase one of the pay flow)."""
    with transaction.atomic():
        # The order row lock is the one lock pay and cancel both take, first: a
        # cancel cannot slip between our checks and our insert.
        order = get_object_or_404(
            orders_to_lock().select_related("user"),
            number=order_number,
            user_id=user_id,
        )
        if order.status != Order.Status.UNPAID:
            raise OrderNotPayable(f"The order is {order.status.lower()}.")
        try:
            with transaction.atomic():
                return Payment.objects.create(
                    order=order,
                    out_trade_no=_new_out_trade_no(),
                    amount=order.amount,
                    currency=order.currency,
                    payer=order.user.get_username(),
                )
        except IntegrityError as error:
            # The partial unique index: another attempt of this order is live.
            raise OrderNotPayable("A payment of this order is in progress.") from error


def order_cancel_blocker(order: Order) -> str | None:
    """Payments' rule for cancelling an order (``orders.services.order_cancel``).

    Refused while an attempt is live: the provider may be charging it (pending,
    unknown), or has (succeeded). Asked under the order's row lock, the lock
    ``payment_create`` takes first too, so no attempt can start in between.
    """
    if Payment.objects.filter(order=order, status__in=LIVE_STATUSES).exists():
        return "A payment of this order is in progress."
    return None


def payment_mark_unknown(*, payment_id: int) -> bool:
    """PENDING -> UNKNOWN after a timeout or provider error; the reconciler takes it."""
    return bool(
        Payment.objects.filter(pk=payment_id, status=PaymentStatus.PENDING).update(
            status=PaymentStatus.UNKNOWN, updated_at=timezone.now()
        )
    )


def payment_mark_action_required(*, payment_id: int) -> bool:
    """The provider waits for the customer: the attempt stays unsettled (PENDING), marked
    with when it was first asked; the reconciler fences it after PAYMENT_ACTION_TIMEOUT_S."""
    now = timezone.now()
    return bool(
        Payment.objects.filter(
            pk=payment_id, status__in=UNSETTLED_STATUSES, action_required_at__isnull=True
        ).update(action_required_at=now, updated_at=now)
    )


def fulfilment_enqueue(order_id: int) -> Callable[[], None]:
    """The hook that asks a worker to ship a newly PAID order (for ``on_commit``)."""

    # A named function, not a partial: Django logs a robust hook's failure by the
    # callable's __qualname__, which a partial does not have.
    def enqueue_fulfil_order() -> None:
        fulfil_order.delay(order_id)

    return enqueue_fulfil_order


def fulfilment_enqueue_many(order_ids: list[int]) -> Callable[[], None]:
    """``fulfilment_enqueue`` for many orders that became PAID together: one message."""

    def enqueue_fulfil_orders() -> None:
        fulfil_orders.delay(order_ids)

    return enqueue_fulfil_orders


class Settlement(enum.Enum):
    """What ``payment_settle`` did: a named outcome for every race, never a 500."""

    APPLIED = "applied"
    ALREADY_APPLIED = "already_applied"  # someone settled it the same way before us
    CONFLICT = "conflict"  # the result contradicts what we hold: left for a human


@dataclass(frozen=True)
class SettleResult:
    outcome: Settlement
    payment: Payment
    reason: str = ""


class _Conflict(Exception):
    """The provider's account contradicts ours: roll the settlement back, report it."""


def payment_settle(
    *, payment_id: int, result: ChargeResult, confirmed: bool = False
) -> SettleResult:
    """Apply the provider's account of an attempt, once.

    Every write is conditional on the state we expect, in one transaction: the
    payment (PENDING/UNKNOWN -> SUCCEEDED/FAILED), the capture ledger entry and
    the order transition (UNPAID -> PAID). A result that would move a state
    backwards or disagrees on the amount changes nothing and is reported.

    ``confirmed``: only ``payments.orphans.capture_orphan_resolve`` passes it,
    with the provider's own account of a capture, after checking the order can
    still take it: then a success may also settle an attempt we had settled
    FAILED (roll forward, the one way out of FAILED).
    """
    try:
        with transaction.atomic():
            return _settle(payment_id=payment_id, result=result, confirmed=confirmed)
    except _Conflict as conflict:
        reason = str(conflict)
        logger.error("payment %s: provider result not applied: %s", payment_id, reason)
        return SettleResult(Settlement.CONFLICT, Payment.objects.get(pk=payment_id), reason)


def _settle(*, payment_id: int, result: ChargeResult, confirmed: bool) -> SettleResult:
    # The one lock order (payments.locks): a settlement never deadlocks with a
    # concurrent pay, cancel, refund or orphan booking of the same order.
    order, payment = lock_order_and_payment(payment_id=payment_id)
    if result.out_trade_no != payment.out_trade_no:
        # An answer about another attempt is never applied to this one.
        raise _Conflict(f"answer names {result.out_trade_no}, not {payment.out_trade_no}")
    now = timezone.now()
    if result.status is ChargeStatus.SUCCESS:
        if (result.amount, result.currency) != (payment.amount, payment.currency):
            raise _Conflict(
                f"provider charged {result.amount} {result.currency}, "
                f"attempt is for {payment.amount} {payment.currency}"
            )
        target = PaymentStatus.SUCCEEDED
        changes = {
            "status": target,
            "trade_no": result.trade_no,
            "settled_at": now,
            "failure_code": "",
        }
        sources = [*UNSETTLED_STATUSES, *([PaymentStatus.FAILED] if confirmed else [])]
    else:
        target = PaymentStatus.FAILED
        failure = result.decline_reason or (
            CLOSED_BY_RECONCILIATION if result.status is ChargeStatus.CLOSED else "declined"
        )
        changes = {"status": target, "failure_code": failure, "settled_at": now}
        if result.trade_no:
            changes["trade_no"] = result.trade_no
        sources = list(UNSETTLED_STATUSES)

    moved = Payment.objects.filter(pk=payment_id, status__in=sources).update(
        updated_at=now, **changes
    )
    if not moved:
        payment.refresh_from_db()
        if payment.status == target and (
            target == PaymentStatus.FAILED or payment.trade_no == result.trade_no
        ):
            return SettleResult(Settlement.ALREADY_APPLIED, payment)
        raise _Conflict(f"attempt is {payment.status}, provider says {result.status}")

    if target == PaymentStatus.SUCCEEDED:
        assert result.trade_no is not None
        # Unique per order and per trade_no: even a bug above could not book twice.
        LedgerEntry.objects.create(
            order_id=payment.order_id,
            payment_id=payment.pk,
            trade_no=result.trade_no,
            amount=payment.amount,
            currency=payment.currency,
        )
        paid_at = result.paid_at or now
        # UNPAID -> PAID, conditional: the UPDATE matches the row only while it is
        # UNPAID. (The lock above orders the writers; this is what makes the move
        # happen once even for a writer that took no lock.)
        paid = Order.objects.filter(pk=order.pk, status=Order.Status.UNPAID).update(
            status=Order.Status.PAID, paid_at=paid_at
        )
        if paid != 1:
            # Cancel and expiry refuse while an attempt is live, so this is a bug
            # or a manual change: roll the whole settlement back and report it.
            raise _Conflict(f"order {order.number} is {order.status}, cannot become PAID")
        # Only after COMMIT: a worker must never look for a PAID order that a
        # rollback took back. At-least-once: the task is safe to run twice.
        # Robust: once committed, the payment succeeded whatever the broker says;
        # a lost message is logged and the fulfil sweep ships the order later.
        transaction.on_commit(fulfilment_enqueue(order.pk), robust=True)
    for name, value in changes.items():
        setattr(payment, name, value)
    return SettleResult(Settlement.APPLIED, payment)
