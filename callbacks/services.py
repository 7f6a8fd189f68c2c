"""Ingesting a verified provider notification: once, and the same answer every time.

The provider delivers at least once: late, early, twice, out of order. The
notification row (unique ``notify_id``) and its effect commit in one
transaction, so a redelivery finds the row and replays the stored answer; the
provider gets its 2xx and stops retrying. The effect goes through
``payment_settle``, the same service the pay flow and the reconciler use, so
whichever of the synchronous answer and the notification arrives first settles
the attempt, and the other changes nothing. Refund notifications (``event:
refund``) take the same way into ``refund_settle``, dispute notifications into
``dispute_apply`` (a chargeback moves money without the shop asking: the
provider's whole account of the dispute is in the notification, and each of
its movements is booked once, whatever order they arrive in).

What cannot be applied (deferred: it contradicts what we hold; rejected: another
amount) is recorded and left unresolved: the reconciler asks the provider, whose
query is the truth, settles the matter (rolling forward, or booking and
refunding an orphaned capture) and marks the notification resolved. A
notification alone never moves money back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from callbacks.errors import CallbackMalformed, CallbackMismatch, CallbackUnknownPayment
from callbacks.models import NOTIFY_ID_UNIQUE, ProviderNotification
from edge.bounds import columns_problems
from edge.errors import ApplicationError
from orders.services import violated_constraint
from payments.disputes import DisputeOutcome, dispute_apply
from payments.models import Payment, Refund
from payments.providers import (
    ChargeResult,
    DisputeNotification,
    Notification,
    RefundNotification,
    RefundResult,
)
from payments.refunds import refund_settle
from payments.services import Settlement, payment_settle

Outcome = ProviderNotification.Outcome

AnyNotification = Notification | RefundNotification | DisputeNotification

# What we answer when we took the notification (applied or not): the body the
# provider sees is the same whatever our bookkeeping concluded.
RECEIVED: dict[str, Any] = {"received": True}


@dataclass(frozen=True)
class IngestAnswer:
    status: int
    body: Any
    outcome: str
    replayed: bool


def _stored(row: ProviderNotification) -> IngestAnswer:
    return IngestAnswer(row.response_status, row.response_body, row.outcome, replayed=True)


def callback_ingest(
    *,
    notification: AnyNotification,
    raw_body: bytes,
    provider: str,
    acknowledge_stored: bool = False,
) -> IngestAnswer:
    """Record ``notification`` and apply it once; a redelivery replays the first answer.

    ``acknowledge_stored``: answer 200 for everything stored, the outcome (and for a
    refusal, its code and reason) in the body, for a provider that retries every
    other answer for days and may switch the endpoint off (Stripe). Otherwise a
    refusal is its problem+json (422), as the sandbox's contract says.
    """
    _refuse_unstorable(notification)
    # A duplicate costs one indexed lookup, no write: the common case under retries.
    if first := ProviderNotification.objects.filter(
        provider=provider, notify_id=notification.notify_id
    ).first():
        return _stored(first)
    try:
        with transaction.atomic():
            return _ingest(
                notification=notification,
                raw_body=raw_body,
                provider=provider,
                acknowledge_stored=acknowledge_stored,
            )
    except IntegrityError as error:
        if violated_constraint(error) != NOTIFY_ID_UNIQUE:
            raise  # another row refused (a bug, not a duplicate): rolled back whole
        # A concurrent delivery of the same notify_id committed first (our INSERT
        # waited on its unique entry, then failed): its effect is in, ours rolled
        # back; answer what it answered.
        return _stored(
            ProviderNotification.objects.get(provider=provider, notify_id=notification.notify_id)
        )


def _refuse_unstorable(notification: AnyNotification) -> None:
    """400 for a value no column of ours can hold (too long, NUL, beyond bigint).

    Signed by the provider, so a provider bug, not an attack; still refused before
    any SQL sees it, and not stored: there is nothing we could store it as. Every
    field of the notification that has a column of the same name is checked.
    """
    columns = {field.name for field in ProviderNotification._meta.get_fields()}
    # A dispute notification's fields are its dispute's (its status goes in trade_status).
    fields = notification.dispute if isinstance(notification, DisputeNotification) else notification
    values = {
        field.name: getattr(fields, field.name)
        for field in dataclasses.fields(fields)
        if field.name in columns
    }
    values["notify_id"] = notification.notify_id
    if problems := columns_problems(ProviderNotification, values):
        raise CallbackMalformed(reason="; ".join(problems))


def _ingest(
    *,
    notification: AnyNotification,
    raw_body: bytes,
    provider: str,
    acknowledge_stored: bool,
) -> IngestAnswer:
    if isinstance(notification, DisputeNotification):
        dispute = notification.dispute
        outcome, reason, error = _apply_dispute(notification)
        row = ProviderNotification(
            event=ProviderNotification.Event.DISPUTE,
            trade_no=dispute.trade_no,
            dispute_id=dispute.dispute_id,
            trade_status=dispute.status,
            payment=Payment.objects.filter(trade_no=dispute.trade_no).first(),
        )
        amount, currency = dispute.amount, dispute.currency
    elif isinstance(notification, RefundNotification):
        refund = Refund.objects.filter(refund_no=notification.out_refund_no).first()
        outcome, reason, error = _apply_refund(notification, refund)
        row = ProviderNotification(
            event=ProviderNotification.Event.REFUND,
            out_refund_no=notification.out_refund_no,
            refund_id=notification.refund_id,
            trade_status=notification.status,
            refund_attempt=refund,
        )
        amount, currency = notification.amount, notification.currency or ""
    else:
        payment = Payment.objects.filter(out_trade_no=notification.out_trade_no).first()
        outcome, reason, error = _apply(notification, payment)
        row = ProviderNotification(
            trade_no=notification.trade_no, trade_status=notification.trade_status, payment=payment
        )
        amount, currency = notification.amount, notification.currency
    status, body = (error.status, error.to_problem()) if error else (200, RECEIVED)
    if acknowledge_stored:
        status, body = 200, _acknowledgement(outcome, error)
    row.provider = provider
    row.notify_id = notification.notify_id
    row.out_trade_no = notification.out_trade_no
    row.amount = amount
    row.currency = currency
    row.raw_payload = raw_body.decode()
    row.outcome, row.reason = outcome, reason
    row.response_status, row.response_body = status, body
    row.save(force_insert=True)
    return IngestAnswer(status, body, outcome, replayed=False)


def _acknowledgement(outcome: str, error: ApplicationError | None) -> dict[str, Any]:
    """The 200 body of a stored notification: received, and what the shop made of it."""
    body: dict[str, Any] = {**RECEIVED, "outcome": outcome}
    if error is not None:
        problem = error.to_problem()
        body.update(code=problem["code"], detail=problem.get("reason") or problem["detail"])
    return body


def _mismatch(
    notification: Notification | RefundNotification, *, amount: int, currency: str
) -> tuple[str, str, ApplicationError] | None:
    if (notification.amount, notification.currency) == (amount, currency):
        return None
    # Never merged: a duplicate event carrying another amount is recorded and refused.
    reason = (
        f"notified {notification.amount} {notification.currency}, attempt is {amount} {currency}"
    )
    return Outcome.REJECTED, reason, CallbackMismatch(reason=reason)


def _settled(outcome: Settlement, reason: str) -> tuple[str, str, ApplicationError | None]:
    match outcome:
        case Settlement.APPLIED:
            return Outcome.APPLIED, "", None
        case Settlement.ALREADY_APPLIED:
            return Outcome.DUPLICATE, "", None
        case Settlement.CONFLICT:
            # E.g. "success" for an attempt we fenced and failed, or "declined" after
            # success: never moved backwards; the reconciler asks the provider.
            return Outcome.DEFERRED, reason, None
    raise AssertionError(outcome)


def _apply(
    notification: Notification, payment: Payment | None
) -> tuple[str, str, ApplicationError | None]:
    """Decide and apply; returns (outcome, reason, the error to answer with if any)."""
    if payment is None:
        # Phase one commits an attempt before the provider ever hears of it, so this
        # is not "early": it is someone else's reference, or data we lost. Keep it.
        return Outcome.UNMATCHED, "no such out_trade_no", CallbackUnknownPayment()
    if mismatch := _mismatch(notification, amount=payment.amount, currency=payment.currency):
        return mismatch
    settled = payment_settle(
        payment_id=payment.pk,
        result=ChargeResult(
            out_trade_no=notification.out_trade_no,
            status=notification.trade_status,
            trade_no=notification.trade_no,
            amount=notification.amount,
            currency=notification.currency,
            paid_at=notification.paid_at,
        ),
    )
    return _settled(settled.outcome, settled.reason)


def _apply_refund(
    notification: RefundNotification, refund: Refund | None
) -> tuple[str, str, ApplicationError | None]:
    if refund is None:
        reason = "no such out_refund_no"
        return Outcome.UNMATCHED, reason, CallbackUnknownPayment(reason=reason)
    if mismatch := _mismatch(notification, amount=refund.amount, currency=refund.currency):
        return mismatch
    settled = refund_settle(
        refund_attempt_id=refund.pk,
        result=RefundResult(
            out_refund_no=notification.out_refund_no,
            out_trade_no=notification.out_trade_no,
            status=notification.status,
            refund_id=notification.refund_id,
            amount=notification.amount,
            currency=notification.currency,
            refunded_at=notification.refunded_at,
        ),
    )
    return _settled(settled.outcome, settled.reason)


def _apply_dispute(notification: DisputeNotification) -> tuple[str, str, ApplicationError | None]:
    outcome, _ = dispute_apply(account=notification.dispute)
    match outcome:
        case DisputeOutcome.APPLIED:
            return Outcome.APPLIED, "", None
        case DisputeOutcome.ALREADY_APPLIED:
            return Outcome.DUPLICATE, "", None
        case DisputeOutcome.UNKNOWN_PAYMENT:
            reason = f"no payment of ours is charge {notification.dispute.trade_no}"
            return Outcome.UNMATCHED, reason, CallbackUnknownPayment(reason=reason)
        case DisputeOutcome.CONFLICT:
            # Not applied and not guessed: the reconciler asks the provider about it.
            return Outcome.DEFERRED, "the dispute contradicts the books: asking", None
    raise AssertionError(outcome)


# Rows per UPDATE: each batch is its own short statement, never one long lock.
STRIP_BATCH_SIZE = 1000


def callback_unmatched_strip(
    *, now: datetime | None = None, batch_size: int = STRIP_BATCH_SIZE
) -> int:
    """Empty the raw body of unmatched notifications older than the bound; return how many.

    An unmatched notification (no attempt with its out_trade_no) is kept for
    reconciliation: its parsed fields, outcome and answer stay, so a redelivery still
    replays and the audit still sees it. Only the verified bytes, the one unbounded
    part, go after UNMATCHED_NOTIFICATION_BODY_TTL_S. Applied ones keep theirs.
    """
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.UNMATCHED_NOTIFICATION_BODY_TTL_S)
    stale = ProviderNotification.objects.filter(
        outcome=ProviderNotification.Outcome.UNMATCHED, received_at__lt=cutoff
    ).exclude(raw_payload="")
    stripped = 0
    while ids := list(stale.values_list("id", flat=True)[:batch_size]):
        stripped += ProviderNotification.objects.filter(id__in=ids).update(raw_payload="")
    return stripped


def callback_store_unapplied(
    *, notify_id: str, kind: str, raw_body: bytes, provider: str
) -> IngestAnswer:
    """Store a verified notification the shop does not apply, once, and acknowledge it.

    The same unique (provider, notify_id) as every other notification: a
    redelivery finds the row and gets the same 200.
    """
    if first := ProviderNotification.objects.filter(provider=provider, notify_id=notify_id).first():
        return _stored(first)
    row = ProviderNotification(
        provider=provider,
        notify_id=notify_id,
        event=ProviderNotification.Event.OTHER,
        out_trade_no="",
        trade_status="",
        amount=0,
        currency="",
        raw_payload=raw_body.decode(),
        outcome=Outcome.IGNORED,
        reason=kind,
        response_status=200,
        response_body={**RECEIVED, "outcome": Outcome.IGNORED.value, "type": kind},
    )
    try:
        with transaction.atomic():
            row.save(force_insert=True)
    except IntegrityError as error:
        if violated_constraint(error) != NOTIFY_ID_UNIQUE:
            raise
        return _stored(ProviderNotification.objects.get(provider=provider, notify_id=notify_id))
    return IngestAnswer(200, row.response_body, Outcome.IGNORED, replayed=False)
