"""Ingesting a verified provider notification: once, and the same answer every time.

The provider delivers at least once: late, early, twice, out of order. The
notification row (unique ``notify_id``) and its effect commit in one
transaction, so a redelivery finds the row and replays the stored answer; the
provider gets its 2xx and stops retrying. The effect goes through
``payment_settle``, the same service the pay flow and the reconciler use, so
whichever of the synchronous answer and the notification arrives first settles
the attempt, and the other changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from callbacks.errors import CallbackMismatch, CallbackUnknownPayment
from callbacks.models import ProviderNotification
from config.errors import ApplicationError
from payments.models import Payment
from payments.providers import ChargeResult, Notification
from payments.services import Settlement, payment_settle

Outcome = ProviderNotification.Outcome

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
    *, notification: Notification, raw_body: bytes, provider: str = "sandbox"
) -> IngestAnswer:
    """Record ``notification`` and apply it once; a redelivery replays the first answer."""
    # A duplicate costs one indexed lookup, no write: the common case under retries.
    if first := ProviderNotification.objects.filter(
        provider=provider, notify_id=notification.notify_id
    ).first():
        return _stored(first)
    try:
        with transaction.atomic():
            return _ingest(notification=notification, raw_body=raw_body, provider=provider)
    except IntegrityError:
        # A concurrent delivery of the same notify_id committed first (our INSERT
        # waited on its unique entry): its effect is in; answer what it answered.
        return _stored(
            ProviderNotification.objects.get(provider=provider, notify_id=notification.notify_id)
        )


def _ingest(*, notification: Notification, raw_body: bytes, provider: str) -> IngestAnswer:
    payment = Payment.objects.filter(out_trade_no=notification.out_trade_no).first()
    outcome, reason, error = _apply(notification, payment)
    status, body = (error.status, error.to_problem()) if error else (200, RECEIVED)
    ProviderNotification.objects.create(
        provider=provider,
        notify_id=notification.notify_id,
        trade_no=notification.trade_no,
        out_trade_no=notification.out_trade_no,
        trade_status=notification.trade_status,
        amount=notification.amount,
        currency=notification.currency,
        raw_payload=raw_body.decode(),
        outcome=outcome,
        reason=reason,
        response_status=status,
        response_body=body,
        payment=payment,
    )
    return IngestAnswer(status, body, outcome, replayed=False)


def _apply(
    notification: Notification, payment: Payment | None
) -> tuple[str, str, ApplicationError | None]:
    """Decide and apply; returns (outcome, reason, the error to answer with if any)."""
    if payment is None:
        # Phase one commits an attempt before the provider ever hears of it, so this
        # is not "early": it is someone else's reference, or data we lost. Keep it.
        return Outcome.UNMATCHED, "no such out_trade_no", CallbackUnknownPayment()
    if (notification.amount, notification.currency) != (payment.amount, payment.currency):
        # Never merged: a duplicate event carrying another amount is recorded and refused.
        reason = (
            f"notified {notification.amount} {notification.currency}, attempt is "
            f"{payment.amount} {payment.currency}"
        )
        return Outcome.REJECTED, reason, CallbackMismatch(reason=reason)
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
    match settled.outcome:
        case Settlement.APPLIED:
            return Outcome.APPLIED, "", None
        case Settlement.ALREADY_APPLIED:
            return Outcome.DUPLICATE, "", None
        case Settlement.CONFLICT:
            # E.g. "success" for an attempt we fenced and failed, or "declined" after
            # success: never moved backwards; the reconciler and the audit look at it.
            return Outcome.DEFERRED, settled.reason, None
    raise AssertionError(settled.outcome)


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
