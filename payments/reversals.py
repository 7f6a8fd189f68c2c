"""Refund reversals: a refund that succeeded, and then failed at the provider.

A refund's money may come back days after the provider said "succeeded": the
card was closed, the account frozen. The provider then says so (Stripe:
``refund.updated`` with ``failed``, a ``refund_failure`` line on the statement;
the sandbox: ``REVERSED``), and the money is back in the shop's balance while
the customer still waits for it. ``refund_settle`` brings such an answer here,
only when it is the provider's query (``confirmed``): a notification alone is
a reason to ask, never the booking itself.

In the settlement's transaction, under the order's lock, each write conditional:

- the attempt SUCCEEDED -> REVERSED (a reversed refund is final, like a decline);
- a reversing ledger entry (``refund_reversal``, or ``orphan_refund_reversal``
  for an orphaned capture's refund), unique per attempt and per provider refund;
- the order's ``refunded_amount`` goes back down (``- x`` only while it holds
  ``x``), and a REFUNDED order becomes PAID again (a conditional transition).

Who tells a person is the reconciler's desk (a ``refund-reversed`` case); an
orphaned capture's refund is simply started again by the reconciler.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import F

from orders.models import Order
from payments.models import LedgerEntry, Refund, RefundAttemptStatus


class ReversalConflict(Exception):
    """The reversal contradicts our books: the settlement rolls back and reports it."""


def refund_reverse(*, order: Order, refund: Refund, reason: str, now: datetime) -> bool:
    """Book the reversal of a SUCCEEDED refund, locked by the caller; False if it was
    reversed already. Raises ReversalConflict for a refund that is not SUCCEEDED."""
    moved = Refund.objects.filter(pk=refund.pk, status=RefundAttemptStatus.SUCCEEDED).update(
        status=RefundAttemptStatus.REVERSED,
        failure_code=reason[:64],
        updated_at=now,
    )
    if not moved:
        refund.refresh_from_db()
        if refund.status == RefundAttemptStatus.REVERSED:
            return False
        raise ReversalConflict(f"refund is {refund.status}, provider says it was reversed")
    assert refund.refund_id is not None  # a SUCCEEDED refund names the provider's refund
    LedgerEntry.objects.create(
        kind=(
            LedgerEntry.Kind.REFUND_REVERSAL
            if refund.order_id
            else LedgerEntry.Kind.ORPHAN_REFUND_REVERSAL
        ),
        order_id=refund.payment.order_id,
        payment_id=refund.payment_id,
        refund_attempt=refund,
        trade_no=refund.payment.trade_no or "",
        refund_id=refund.refund_id,
        amount=refund.amount,
        currency=refund.currency,
    )
    if refund.order_id is not None:  # an orphaned capture's refund is not the order's
        _uncount_refund(order=order, amount=refund.amount)
    refund.status = RefundAttemptStatus.REVERSED
    refund.failure_code = reason[:64]
    return True


def _uncount_refund(*, order: Order, amount: int) -> None:
    """``refunded_amount -= amount`` while it holds that much, then REFUNDED -> PAID.

    The mirror of counting a refund in (``payments.refunds``): never
    read-modify-written in Python, the condition evaluated under the row lock.
    """
    shrank = Order.objects.filter(pk=order.pk, refunded_amount__gte=amount).update(
        refunded_amount=F("refunded_amount") - amount
    )
    if not shrank:
        raise ReversalConflict(f"order {order.number}: {amount} to reverse, less was refunded")
    order.refresh_from_db(fields=["refunded_amount"])
    if order.status != Order.Status.REFUNDED:
        return  # a partial refund reversed: the order was, and stays, PAID
    # REFUNDED -> PAID, conditional: only a REFUNDED order no longer fully refunded.
    unrefunded = Order.objects.filter(
        pk=order.pk, status=Order.Status.REFUNDED, refunded_amount__lt=F("amount")
    ).update(status=Order.Status.PAID)
    if unrefunded != 1:
        raise ReversalConflict(f"order {order.number} is {order.status}, cannot become PAID again")
