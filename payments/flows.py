"""Paying an order as an idempotent flow with recovery points (after rocket-rides-atomic).

    started ──phase 1──▶ payment_created ──provider call──▶ phase 2 ──▶ finished
             (atomic)     (committed)       (no transaction)  (atomic)

Phase 1 commits the payment attempt (PENDING) together with the record at
``payment_created``. The provider is then called outside any transaction, with
a key derived from the attempt, so calling it again for the same attempt is a
replay at the provider, never a second charge. Phase 2 commits the payment's
outcome, the ledger entry, the order transition and the stored response in one
transaction.

If the provider's answer is unknown (timeout, 5xx, garbage), the attempt is
marked UNKNOWN and the client gets 503 without a stored answer: the record
stays at ``payment_created``. A retry with the same key resumes there and asks
the provider what happened (query by ``out_trade_no``) before charging; the
reconciler does the same if the client never returns.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from django.conf import settings
from django.urls import reverse

from idempotency.core import MoveTo, Respond, atomic_phase
from idempotency.errors import UnknownRecoveryPoint
from idempotency.models import IdempotencyKey, RecoveryPoint
from orders.serializers import order_representation
from payments.errors import (
    PaymentDeclined,
    PaymentFailed,
    PaymentOutcomeUnknown,
    RefundDeclined,
    RefundOutcomeUnknown,
)
from payments.models import (
    UNSETTLED_REFUND_STATUSES,
    Payment,
    PaymentStatus,
    Refund,
    RefundAttemptStatus,
)
from payments.orphans import OrphanOutcome, capture_orphan_resolve
from payments.providers import (
    ChargeResult,
    ChargeStatus,
    PaymentProvider,
    ProviderOutcomeUnknown,
    RefundResult,
)
from payments.refunds import (
    RefundRequest,
    refund_create,
    refund_mark_unknown,
    refund_send,
    refund_settle,
)
from payments.services import (
    CLOSED_BY_RECONCILIATION,
    Settlement,
    payment_create,
    payment_mark_unknown,
    payment_settle,
    provider_idempotency_key,
)

# The answer to a pay whose charge came too late for its order (see payments/orphans.py).
ORPHANED_DETAIL = (
    "The provider captured this payment after the order could no longer take it; "
    "the money is being refunded automatically."
)


class PayPoint(RecoveryPoint):
    PAYMENT_CREATED = "payment_created"


def order_pay_flow(
    record: IdempotencyKey, *, user_id: int, order_number: str, provider: PaymentProvider
) -> None:
    while True:
        match record.recovery_point:
            case PayPoint.STARTED:
                atomic_phase(record, lambda: _start(user_id=user_id, order_number=order_number))
            case PayPoint.PAYMENT_CREATED:
                payment_id = record.resource_id
                assert payment_id is not None
                result = _ask_provider(payment_id=payment_id, provider=provider)
                try:
                    atomic_phase(record, partial(_finish, payment_id=payment_id, result=result))
                except _CaptureNotApplied:
                    # Outside the rolled-back phase: account for the capture, then go
                    # round again and answer from what the attempt became.
                    _resolve_capture(payment_id=payment_id, provider=provider)
            case PayPoint.FINISHED:
                return
            case other:
                raise UnknownRecoveryPoint(other)


def _start(*, user_id: int, order_number: str) -> MoveTo:
    payment = payment_create(user_id=user_id, order_number=order_number)
    return MoveTo(PayPoint.PAYMENT_CREATED, resource_type="payment", resource_id=payment.pk)


def _ask_provider(*, payment_id: int, provider: PaymentProvider) -> ChargeResult | None:
    """The provider's account of the attempt; None if it is settled already.

    Runs outside any transaction: holding row locks (or a connection in a
    transaction) while waiting on a third party would stall everyone else.
    """
    payment = Payment.objects.get(pk=payment_id)
    if payment.status not in (PaymentStatus.PENDING, PaymentStatus.UNKNOWN):
        return None  # a notification or the reconciler settled it while we were away
    try:
        if payment.status == PaymentStatus.UNKNOWN:
            # We asked before and got no answer: find out before asking again. (The
            # derived key would make a second charge a replay anyway; asking first
            # also respects a fence the reconciler may have put up.)
            known = provider.query(out_trade_no=payment.out_trade_no)
            if known is not None:
                return known
        return provider.charge(
            out_trade_no=payment.out_trade_no,
            amount=payment.amount,
            currency=payment.currency,
            payer=payment.payer,
            notify_url=settings.SHOP_BASE_URL + reverse("callback-sandbox"),
            idempotency_key=provider_idempotency_key(payment),
        )
    except ProviderOutcomeUnknown as error:
        payment_mark_unknown(payment_id=payment.pk)
        raise PaymentOutcomeUnknown(reason=str(error)) from error


def _finish(*, payment_id: int, result: ChargeResult | None) -> Respond:
    if result is None:  # settled meanwhile by a notification or the reconciler
        payment = Payment.objects.get(pk=payment_id)
    else:
        settled = payment_settle(payment_id=payment_id, result=result)
        if settled.outcome is Settlement.CONFLICT:
            if result.status is ChargeStatus.SUCCESS:
                # Captured, but not applicable (the attempt was failed or fenced
                # meanwhile, another amount...): never dropped; see _resolve_capture.
                raise _CaptureNotApplied(settled.reason)
            # Not applied and not guessed: the reconciler and the audit take it from here.
            raise PaymentOutcomeUnknown(reason=settled.reason)
        payment = settled.payment
    match payment.status:
        case PaymentStatus.SUCCEEDED:
            return Respond(
                status=200,
                body=order_representation(order_id=payment.order_id),
                resource_type="payment",
                resource_id=payment.pk,
            )
        case PaymentStatus.ORPHANED:
            return _final_error(
                PaymentFailed(ORPHANED_DETAIL, payment=payment.out_trade_no), payment
            )
        case PaymentStatus.FAILED if payment.failure_code == CLOSED_BY_RECONCILIATION:
            return _final_error(PaymentFailed(payment=payment.out_trade_no), payment)
        case PaymentStatus.FAILED:
            return _final_error(
                PaymentDeclined(payment=payment.out_trade_no, reason=payment.failure_code), payment
            )
        case _:
            raise PaymentOutcomeUnknown()


class _CaptureNotApplied(Exception):
    """The provider captured the attempt, and the settlement could not apply it."""


def _resolve_capture(*, payment_id: int, provider: PaymentProvider) -> None:
    """Ask the provider (its query is the truth), then roll forward or book the orphan."""
    payment = Payment.objects.get(pk=payment_id)
    try:
        capture = provider.query(out_trade_no=payment.out_trade_no)
    except ProviderOutcomeUnknown as error:
        # Its notification (sent for every settled charge) brings it back via the reconciler.
        raise PaymentOutcomeUnknown(reason=str(error)) from error
    if (
        capture is None
        or capture_orphan_resolve(payment_id=payment_id, capture=capture) is OrphanOutcome.CONFLICT
    ):
        raise PaymentOutcomeUnknown(reason="the provider's account contradicts ours")


def _final_error(error: PaymentDeclined | PaymentFailed, payment: Payment) -> Respond:
    # Returned, not raised: the payment's FAILED state must commit with the answer.
    return replace(Respond.from_error(error), resource_type="payment", resource_id=payment.pk)


# --- Refunds: the same shape, money going the other way ---------------------------


class RefundPoint(RecoveryPoint):
    REFUND_CREATED = "refund_created"


def order_refund_flow(
    record: IdempotencyKey, *, request: RefundRequest, provider: PaymentProvider
) -> None:
    """Refund an order: started -> refund_created (committed) -> provider -> finished.

    Exactly the pay flow's recovery points and reasons: phase one commits the
    refund attempt (PENDING) with the record; the provider is asked outside any
    transaction with a key derived from the attempt; phase two commits the
    outcome, the ledger entry, the order's refunded amount (and PAID -> REFUNDED)
    and the stored answer together. An unknown outcome answers 503 and leaves
    the record at ``refund_created``; the same key resumes there, asking the
    provider first (``query_refund``), and the reconciler does if nobody returns.
    """
    while True:
        match record.recovery_point:
            case RefundPoint.STARTED:
                atomic_phase(record, partial(_start_refund, request=request))
            case RefundPoint.REFUND_CREATED:
                refund_id = record.resource_id
                assert refund_id is not None
                result = _ask_provider_to_refund(refund_id=refund_id, provider=provider)
                atomic_phase(record, partial(_finish_refund, refund_id=refund_id, result=result))
            case RefundPoint.FINISHED:
                return
            case other:
                raise UnknownRecoveryPoint(other)


def _start_refund(*, request: RefundRequest) -> MoveTo:
    refund = refund_create(
        user_id=request.user_id,
        is_staff=request.is_staff,
        order_number=request.order_number,
        amount=request.amount,
        reason=request.reason,
    )
    return MoveTo(RefundPoint.REFUND_CREATED, resource_type="refund", resource_id=refund.pk)


def _ask_provider_to_refund(*, refund_id: int, provider: PaymentProvider) -> RefundResult | None:
    """The provider's account of the refund; None if it is settled already.

    Outside any transaction, for the reason the pay flow's call is.
    """
    refund = Refund.objects.select_related("payment").get(pk=refund_id)
    if refund.status not in UNSETTLED_REFUND_STATUSES:
        return None  # a notification or the reconciler settled it while we were away
    try:
        if refund.status == RefundAttemptStatus.UNKNOWN:
            # Asked before, no answer: find out first. The derived key would make a
            # second refund a replay anyway; asking first is cheaper and exact.
            known = provider.query_refund(out_refund_no=refund.refund_no)
            if known is not None:
                return known
        return refund_send(refund=refund, provider=provider)
    except ProviderOutcomeUnknown as error:
        refund_mark_unknown(refund_id=refund.pk)
        raise RefundOutcomeUnknown(reason=str(error)) from error


def _finish_refund(*, refund_id: int, result: RefundResult | None) -> Respond:
    if result is None:  # settled meanwhile by a notification or the reconciler
        refund = Refund.objects.get(pk=refund_id)
    else:
        settled = refund_settle(refund_id=refund_id, result=result)
        if settled.outcome is Settlement.CONFLICT:
            # Not applied and not guessed: the reconciler asks the provider again.
            raise RefundOutcomeUnknown(reason=settled.reason)
        refund = settled.refund
    match refund.status:
        case RefundAttemptStatus.SUCCEEDED:
            assert refund.order_id is not None
            return Respond(
                status=200,
                body=order_representation(order_id=refund.order_id),
                resource_type="refund",
                resource_id=refund.pk,
            )
        case RefundAttemptStatus.FAILED:
            error = RefundDeclined(refund=refund.refund_no, reason=refund.failure_code)
            # Returned, not raised: the refund's FAILED state commits with the answer.
            return replace(Respond.from_error(error), resource_type="refund", resource_id=refund.pk)
        case _:
            raise RefundOutcomeUnknown()
