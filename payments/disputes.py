"""Disputes (chargebacks): money the provider moves back to the payer without asking.

The payer's bank disputes a capture; the provider withdraws the money from the
shop at once and gives it to the payer; weeks later the dispute closes, won
(the money is reinstated to the shop) or lost (it stays with the payer). The
shop learns of it from a notification, the statement or the provider's
answer about the dispute, and books it from the provider's account only
(``DisputeResult``: a query answer, or a verified notification, which carries
the provider's whole dispute object), once, whichever comes first and in
whatever order:

- one ``Dispute`` row per provider dispute id (a unique column, inserted ON
  CONFLICT DO NOTHING, then locked);
- its status moves OPEN -> WON or LOST once (a conditional update); a closed
  dispute never reopens, and an older account of it (OPEN after LOST) changes
  nothing;
- a ledger entry for the money withdrawn and one for the money reinstated, each
  unique per dispute and direction, booked when the provider's account first
  shows that money moved;
- the order is not touched: it was paid, and stays PAID (or REFUNDED). What the
  payer got back through a dispute is the dispute's, never counted in the
  order's ``refunded_amount``; while a dispute is open or lost the order cannot
  be refunded as well (``refund_create``).

Who tells a person is the reconciler's desk (a ``dispute`` case while it is open).
"""

from __future__ import annotations

import enum
import logging

from django.db import IntegrityError, transaction
from django.utils import timezone

from payments.locks import lock_order_and_payment
from payments.models import Dispute, DisputeStatus, LedgerEntry, Payment
from payments.providers import DisputeResult
from payments.providers import DisputeStatus as ProviderDisputeStatus

logger = logging.getLogger(__name__)

# A dispute open or lost holds (or took) the capture's money: no refund beside it.
HOLDING_STATUSES = (DisputeStatus.OPEN, DisputeStatus.LOST)


class DisputeOutcome(enum.Enum):
    """What ``dispute_apply`` did with the provider's account of a dispute."""

    APPLIED = "applied"  # something new was booked (the row, its status, its money)
    ALREADY_APPLIED = "already_applied"  # the books said so already
    UNKNOWN_PAYMENT = "unknown_payment"  # no attempt of ours holds the disputed charge
    CONFLICT = "conflict"  # the account contradicts the books: not applied, for a person


def dispute_apply(*, account: DisputeResult) -> tuple[DisputeOutcome, Dispute | None]:
    """Book the provider's account of a dispute, once (see the module)."""
    payment = Payment.objects.filter(trade_no=account.trade_no).first()
    if payment is None:
        return DisputeOutcome.UNKNOWN_PAYMENT, None
    try:
        with transaction.atomic():
            return _apply(payment=payment, account=account)
    except (_Conflict, IntegrityError) as conflict:
        logger.error("dispute %s: not applied: %s", account.dispute_id, conflict)
        return DisputeOutcome.CONFLICT, Dispute.objects.filter(
            dispute_id=account.dispute_id
        ).first()


class _Conflict(Exception):
    """The provider's account contradicts ours: roll back, report."""


def _apply(*, payment: Payment, account: DisputeResult) -> tuple[DisputeOutcome, Dispute]:
    # The one lock order (payments.locks): the order, then the attempt, then the rest.
    _, payment = lock_order_and_payment(payment_id=payment.pk)
    if account.out_trade_no and account.out_trade_no != payment.out_trade_no:
        raise _Conflict(f"names {account.out_trade_no}, the charge is {payment.out_trade_no}'s")
    if account.currency != payment.currency or account.reinstated > account.withdrawn:
        raise _Conflict(f"an account we cannot book: {account}")
    # Every writer of a dispute holds its order's lock (taken above), so this read and
    # the insert after it cannot race; the unique dispute_id would refuse one anyway.
    dispute = Dispute.objects.filter(dispute_id=account.dispute_id).first()
    changed = dispute is None
    if dispute is None:
        dispute = Dispute.objects.create(
            dispute_id=account.dispute_id,
            payment=payment,
            amount=account.amount,
            currency=account.currency,
            reason=account.reason[:64],
        )
    if dispute.payment_id != payment.pk:
        raise _Conflict(f"dispute {dispute.dispute_id} is of another payment already")
    changed |= _close(dispute, account=account)
    changed |= _book(dispute, LedgerEntry.Kind.DISPUTE_WITHDRAWAL, account.withdrawn, payment)
    changed |= _book(dispute, LedgerEntry.Kind.DISPUTE_REINSTATEMENT, account.reinstated, payment)
    dispute.refresh_from_db()
    return (DisputeOutcome.APPLIED if changed else DisputeOutcome.ALREADY_APPLIED), dispute


_CLOSED = {
    ProviderDisputeStatus.WON: DisputeStatus.WON,
    ProviderDisputeStatus.LOST: DisputeStatus.LOST,
}


def _close(dispute: Dispute, *, account: DisputeResult) -> bool:
    """OPEN -> WON or LOST, once (an account saying OPEN after that changes nothing)."""
    target = _CLOSED.get(account.status)
    if target is None:
        return False
    if dispute.status not in (DisputeStatus.OPEN, target):
        raise _Conflict(f"dispute {dispute.dispute_id} is {dispute.status}, provider says {target}")
    return bool(
        Dispute.objects.filter(pk=dispute.pk, status=DisputeStatus.OPEN).update(
            status=target, closed_at=timezone.now()
        )
    )


def _book(dispute: Dispute, kind: str, amount: int, payment: Payment) -> bool:
    """The dispute's money in one direction, booked once when it first shows."""
    if amount == 0:
        return False
    entry = LedgerEntry.objects.filter(dispute=dispute, kind=kind).first()
    if entry is not None:
        if entry.amount != amount:
            raise _Conflict(f"{kind} of {dispute.dispute_id}: booked {entry.amount}, now {amount}")
        return False
    LedgerEntry.objects.create(
        kind=kind,
        order_id=payment.order_id,
        payment_id=payment.pk,
        dispute=dispute,
        trade_no=payment.trade_no or "",
        amount=amount,
        currency=dispute.currency,
    )
    field = "withdrawn" if kind == LedgerEntry.Kind.DISPUTE_WITHDRAWAL else "reinstated"
    Dispute.objects.filter(pk=dispute.pk).update(**{field: amount})
    return True


def payment_disputed(*, payment_id: int) -> bool:
    """A dispute of this capture is open or lost: its money is not the shop's to refund."""
    return Dispute.objects.filter(payment_id=payment_id, status__in=HOLDING_STATUSES).exists()
