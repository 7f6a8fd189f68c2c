"""Refunds: giving back (part of) a successful charge, once per ``out_refund_no``.

Built like charges (services.charges): the refund row, the charge's refunded
total, the wallet credit, the idempotency record and the notification rows
commit in ONE transaction; dedupe is by unique constraints (the key and
``out_refund_no``), never by a read; faults misbehave only around that commit.

The limit "refunds of a charge never exceed it" is one conditional UPDATE on the
charge (``refunded_total + amount <= amount``, only while SUCCESS), evaluated by
PostgreSQL under the row lock, so concurrent refunds of one charge queue on that
row and the last one that would go over is declined; a CHECK backs it.

Decisions a merchant relies on:
- an ``out_trade_no`` the provider holds no row for: 404 ``charge-not-found``,
  nothing stored (a retry once the charge exists is a new request);
- a charge that is not SUCCESS (DECLINED, CLOSED): 200 DECLINED
  ``charge_not_refundable``, stored and deduped like any refund;
- more than the charge's refundable rest: 200 DECLINED ``exceeds_refundable``;
- a disputed charge: 200 DECLINED ``charge_disputed`` (the dispute decides);
- under ``refund_reversal``: SUCCESS now, and REVERSED after the fault's delay_s
  (services.reversals).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F
from django.utils import timezone

from demo.sandbox.errors import ChargeNotFound, OutRefundNoMismatch
from demo.sandbox.models import Charge, Fault, Refund
from demo.sandbox.serializers import refund_json
from demo.sandbox.services.declines import (
    DECLINE_CHARGE_DISPUTED,
    DECLINE_CHARGE_NOT_REFUNDABLE,
    DECLINE_EXCEEDS_REFUNDABLE,
    DECLINE_PENDING,
    DECLINE_SCRIPTED,
)
from demo.sandbox.services.faults import AppliedFaults
from demo.sandbox.services.idempotency import Answer, create_once, fingerprint, record_insert
from demo.sandbox.services.late_success import refund_late_success_schedule
from demo.sandbox.services.notifications import refund_notifications_schedule
from demo.sandbox.services.reversals import refund_reversal_schedule
from demo.sandbox.services.wallets import wallet_credit


@dataclass(frozen=True)
class RefundTerms:
    """The refund request body, validated."""

    out_refund_no: str
    out_trade_no: str
    amount: int
    notify_url: str


def _new_refund_id() -> str:
    # 80 random bits, like trade_no; the unique index refuses a collision anyway.
    return "R" + secrets.token_hex(10).upper()


def charge_take_refund(*, charge: Charge, amount: int) -> bool:
    """Count ``amount`` against the charge if it is SUCCESS, not disputed, and has that
    much left (the condition is on the charge row itself, so a dispute opening on it
    at the same instant is seen: one of the two waits for the other's row lock)."""
    return bool(
        Charge.objects.filter(
            pk=charge.pk,
            status=Charge.Status.SUCCESS,
            disputed_at__isnull=True,
            refunded_total__lte=F("amount") - amount,
        ).update(refunded_total=F("refunded_total") + amount)
    )


def _settle(*, terms: RefundTerms, charge: Charge, faults: AppliedFaults) -> Refund:
    """Decide the outcome, move the money, and write the refund row: all or nothing."""
    status, reason, refunded_at = Refund.Status.SUCCESS, None, timezone.now()
    late_success_at: datetime | None = None
    if faults.decline:
        status, reason = Refund.Status.DECLINED, DECLINE_SCRIPTED
    elif faults.late_success_delay_s is not None:
        # Declined now, nothing taken from the charge; late_success succeeds it later.
        status, reason = Refund.Status.DECLINED, DECLINE_PENDING
        late_success_at = timezone.now() + timedelta(seconds=faults.late_success_delay_s)
    elif charge_take_refund(charge=charge, amount=terms.amount):
        assert charge.wallet_id is not None  # a SUCCESS charge has its terms
        wallet_credit(wallet_id=charge.wallet_id, amount=terms.amount)
    else:
        # The UPDATE decided; this read only names the reason (the charge's status
        # cannot leave SUCCESS, nor a dispute go away, so what is read now was so then).
        now = Charge.objects.get(pk=charge.pk)
        status = Refund.Status.DECLINED
        if now.disputed_at is not None:
            reason = DECLINE_CHARGE_DISPUTED
        elif now.status == Charge.Status.SUCCESS:
            reason = DECLINE_EXCEEDS_REFUNDABLE
        else:
            reason = DECLINE_CHARGE_NOT_REFUNDABLE
    # Inserted after the money: if a concurrent request already holds this
    # out_refund_no, the INSERT waits for it and raises, and the savepoint takes
    # our refund back with it.
    return Refund.objects.create(
        refund_id=_new_refund_id(),
        out_refund_no=terms.out_refund_no,
        charge=charge,
        status=status,
        amount=terms.amount,
        currency=charge.currency,
        notify_url=terms.notify_url,
        decline_reason=reason,
        refunded_at=refunded_at if status == Refund.Status.SUCCESS else None,
        late_success_at=late_success_at,
        reverses_at=(
            timezone.now() + timedelta(seconds=faults.reversal_delay_s)
            if status == Refund.Status.SUCCESS and faults.reversal_delay_s is not None
            else None
        ),
    )


def _dedupe(*, key: str, terms: RefundTerms) -> Answer | None:
    """A new key for a refund the provider already holds: answer with it (None: new)."""
    existing = (
        Refund.objects.select_related("charge").filter(out_refund_no=terms.out_refund_no).first()
    )
    if existing is None:
        return None
    if existing.charge.out_trade_no != terms.out_trade_no or existing.amount != terms.amount:
        # Never merge: the same refund reference with other terms is a merchant bug.
        raise OutRefundNoMismatch(refund_id=existing.refund_id)
    body = refund_json(existing)
    record_insert(key=key, fingerprint=fingerprint(terms), refund=existing, body=body)
    return Answer(body=body, replayed=False)


_RACE_CONSTRAINTS = {"sandbox_refund_out_refund_no_unique", "sandbox_idempotency_key_unique"}


def _settle_new(*, terms: RefundTerms, faults: AppliedFaults) -> Refund:
    # Charge rows are never deleted: a row read here is there at commit. None: the
    # 404 rolls back the whole transaction, the consumed fault count with it.
    charge = Charge.objects.filter(out_trade_no=terms.out_trade_no).first()
    if charge is None:
        raise ChargeNotFound()
    return _settle(terms=terms, charge=charge, faults=faults)


def _finish(*, key: str, terms: RefundTerms, refund: Refund, faults: AppliedFaults) -> Answer:
    """Store the answer and schedule what the new refund sends."""
    body = refund_json(refund)
    record_insert(key=key, fingerprint=fingerprint(terms), refund=refund, body=body)
    refund_notifications_schedule(refund=refund, faults=faults)
    if refund.late_success_at is not None:
        refund_late_success_schedule(refund=refund)
    if refund.reverses_at is not None:
        refund_reversal_schedule(refund=refund)
    return Answer(body=body, replayed=False)


def refund_create(
    *, idempotency_key: str, out_refund_no: str, out_trade_no: str, amount: int, notify_url: str
) -> Answer:
    """Refund ``amount`` of a charge once per key and once per ``out_refund_no``.

    Raises 404 for an unknown ``out_trade_no``, 422 on a key or out_refund_no
    reused with other terms, and the ``provider-error`` 500 when a scripted fault
    says so (before or after commit).
    """
    terms = RefundTerms(
        out_refund_no=out_refund_no, out_trade_no=out_trade_no, amount=amount, notify_url=notify_url
    )
    return create_once(
        key=idempotency_key,
        fingerprint=fingerprint(terms),
        reference=out_refund_no,
        target=Fault.Target.REFUND,
        race_constraints=_RACE_CONSTRAINTS,
        dedupe=lambda: _dedupe(key=idempotency_key, terms=terms),
        settle=lambda faults: _settle_new(terms=terms, faults=faults),
        finish=lambda refund, faults: _finish(
            key=idempotency_key, terms=terms, refund=refund, faults=faults
        ),
    )
