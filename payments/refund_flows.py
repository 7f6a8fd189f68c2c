"""Refunding an order as an idempotent flow: the pay flow's shape, money going back.

    started ──phase 1──▶ refund_created ──provider call──▶ phase 2 ──▶ finished
             (atomic)     (committed)      (no transaction)  (atomic)

Phase 1 commits the refund attempt (PENDING) together with the record at
``refund_created``. The provider is then asked outside any transaction, with a
key derived from the refund attempt, so asking again for the same attempt is a
replay at the provider, never a second refund. Phase 2 commits the outcome,
its ledger entry, the order's refunded amount (and PAID -> REFUNDED) and the
stored response in one transaction.

An unknown outcome marks the attempt UNKNOWN and answers 503 without a stored
answer: the record stays at ``refund_created``; a retry with the same key asks
the provider first (``query_refund``), and the reconciler does if nobody returns.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial

from django.db.models import Exists, OuterRef

from idempotency.errors import UnknownRecoveryPoint
from idempotency.models import IdempotencyKey, RecoveryPoint
from idempotency.phases import MoveTo, Respond, atomic_phase
from observability import context
from orders.models import Order
from orders.serializers import order_representation
from payments.earlier import MAX_EARLIER_ASKED, within_lock_budget
from payments.errors import RefundDeclined, RefundOutcomeUnknown
from payments.models import UNSETTLED_REFUND_STATUSES, Refund, RefundAttemptStatus
from payments.providers import (
    PaymentProvider,
    ProviderOutcomeUnknown,
    RefundResult,
    RefundStatus,
)
from payments.refunds import (
    REJECTED_PREFIX,
    RefundRequest,
    refund_create,
    refund_mark_unknown,
    refund_send,
    refund_settle,
)
from payments.services import Settlement

logger = logging.getLogger(__name__)


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
    Before phase one, the provider is asked about the order's earlier declined
    refunds (``_settle_earlier_refunds``), as the pay flow asks about failed charges.
    """
    while True:
        match record.recovery_point:
            case RefundPoint.STARTED:
                _settle_earlier_refunds(request=request, provider=provider)
                atomic_phase(record, partial(_start_refund, request=request, record=record))
            case RefundPoint.REFUND_CREATED:
                attempt_id = record.resource_id
                assert attempt_id is not None
                result = _ask_provider_to_refund(refund_attempt_id=attempt_id, provider=provider)
                atomic_phase(
                    record, partial(_finish_refund, refund_attempt_id=attempt_id, result=result)
                )
            case RefundPoint.FINISHED:
                return
            case other:
                raise UnknownRecoveryPoint(other)


def _settle_earlier_refunds(*, request: RefundRequest, provider: PaymentProvider) -> None:
    """Before a new refund attempt of an order, ask the provider about its earlier
    declined ones, and book one it carried out late. Outside any transaction.

    A decline is final for the attempt's answer (its key keeps replaying 402), not
    for the money: a provider may carry a declined refund out later (docs/design.md,
    "Late outcomes"). Booked here (``refund_settle`` with the
    provider's query, so FAILED -> SUCCEEDED once, under the order's lock), the
    order's ``refunded_amount`` counts it before phase one checks the new refund
    against what is left: one that no longer fits is the contract's 409
    ``refund-exceeds-paid`` (or ``order-not-refundable`` once all is back),
    stored like any final answer, and nothing more is sent. Provider
    unreachable: 503 ``refund-outcome-unknown`` (nothing stored, nothing sent;
    the same key asks again) rather than a refund beside one that may have gone
    through.
    """
    orders = Order.objects.filter(number=request.order_number, status=Order.Status.PAID)
    if not request.is_staff:
        orders = orders.filter(user_id=request.user_id)
    declined = Refund.objects.filter(order=OuterRef("pk"), status=RefundAttemptStatus.FAILED)
    if not orders.filter(Exists(declined)).exists():
        return  # the common case, an order's first refund: one cheap read, nothing to ask
    # A refusal of the request itself (4xx, ``rejected-...``) left nothing at the
    # provider to carry out: never asked about. The others newest first, as many as
    # the key's lock has room for (payments.earlier, as the pay flow does); an older
    # one's late success still reaches the reconciler by notification or statement.
    can_succeed_late = (
        Refund.objects.filter(order__in=orders, status=RefundAttemptStatus.FAILED)
        .exclude(failure_code__startswith=REJECTED_PREFIX)
        .select_related("payment")
        .order_by("-pk")[:MAX_EARLIER_ASKED]
    )
    for earlier in within_lock_budget(list(can_succeed_late)):
        try:
            account = provider.query_refund(out_refund_no=earlier.refund_no)
        except ProviderOutcomeUnknown as error:
            raise RefundOutcomeUnknown(reason=str(error)) from error
        if account is not None and account.status is RefundStatus.SUCCESS:
            logger.warning("refund %s: declined, then carried out late", earlier.refund_no)
            # A conflict (the provider's account contradicts ours) is logged by the
            # settlement and left to the reconciler and the audit, as everywhere.
            refund_settle(refund_attempt_id=earlier.pk, result=account, confirmed=True)


def _start_refund(*, request: RefundRequest, record: IdempotencyKey) -> MoveTo:
    refund = refund_create(
        user_id=request.user_id,
        is_staff=request.is_staff,
        order_number=request.order_number,
        amount=request.amount,
        reason=request.reason,
        idempotency_key=record.key,
    )
    return MoveTo(RefundPoint.REFUND_CREATED, resource_type="refund", resource_id=refund.pk)


def _ask_provider_to_refund(
    *, refund_attempt_id: int, provider: PaymentProvider
) -> RefundResult | None:
    """The provider's account of the refund; None if it is settled already.

    Outside any transaction, for the reason the pay flow's call is.
    """
    refund = Refund.objects.select_related("payment").get(pk=refund_attempt_id)
    # The provider's names for this refund and its charge, on every line from here on.
    context.bind(out_refund_no=refund.refund_no, out_trade_no=refund.payment.out_trade_no)
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
        refund_mark_unknown(refund_attempt_id=refund.pk)
        raise RefundOutcomeUnknown(reason=str(error)) from error


def _finish_refund(*, refund_attempt_id: int, result: RefundResult | None) -> Respond:
    if result is None:  # settled meanwhile by a notification or the reconciler
        refund = Refund.objects.get(pk=refund_attempt_id)
    else:
        settled = refund_settle(refund_attempt_id=refund_attempt_id, result=result)
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
        case RefundAttemptStatus.FAILED | RefundAttemptStatus.REVERSED:
            # REVERSED: it went through, then the provider could not pay it out, and
            # the money is back with the shop: for the customer, nothing came back.
            error = RefundDeclined(refund=refund.refund_no, reason=refund.failure_code)
            # Returned, not raised: the refund's FAILED state commits with the answer.
            return replace(Respond.from_error(error), resource_type="refund", resource_id=refund.pk)
        case _:
            raise RefundOutcomeUnknown()
