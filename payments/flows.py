"""Paying an order as an idempotent flow with recovery points (after rocket-rides-atomic).

    started ──phase 1──▶ payment_created ──provider call──▶ phase 2 ──▶ finished
             (atomic)     (committed)       (no transaction)  (atomic)

A provider whose charge is two calls (``PreparesCharges``: Stripe creates a
PaymentIntent, then confirms it) gets one more recovery point in between:

    payment_created ──create──▶ charge_prepared ──confirm──▶ phase 2 ──▶ finished
                    (no txn)    (its id committed)  (no txn)

The created object's id is committed (as the attempt's ``trade_no``) before it is
confirmed, so a crash or a lost answer after the create resumes from the record
and confirms that same object; nothing ever creates a second one for the attempt.

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

If the provider waits for the customer (3-D Secure: ``CustomerActionRequired``),
the answer is 202 ``payment-action-required`` with what the client needs to
finish it, not stored either: the attempt stays PENDING and the record at its
point, marked (``action_required_at``) so that the same key asks the provider
(query) before anything else, and answers 202 again until the attempt settles.
The reconciler fences an attempt still waiting after PAYMENT_ACTION_TIMEOUT_S.
"""

from __future__ import annotations

from functools import partial

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.urls import reverse

from idempotency.errors import UnknownRecoveryPoint
from idempotency.models import IdempotencyKey, RecoveryPoint
from idempotency.phases import MoveTo, Respond, atomic_phase
from observability import context
from orders.models import Order
from orders.serializers import order_representation
from payments.answers import pay_answer
from payments.earlier import MAX_EARLIER_ASKED, within_lock_budget
from payments.errors import PaymentActionRequired, PaymentOutcomeUnknown
from payments.models import Payment, PaymentStatus
from payments.orphans import OrphanOutcome, capture_orphan_resolve
from payments.providers import (
    ChargeResult,
    ChargeStatus,
    CustomerActionRequired,
    PaymentProvider,
    PreparesCharges,
    ProviderOutcomeUnknown,
    ProviderRejected,
)
from payments.services import (
    CLOSED_BY_RECONCILIATION,
    Settlement,
    payment_create,
    payment_mark_action_required,
    payment_mark_unknown,
    payment_settle,
    provider_idempotency_key,
)

# The failure_code of an attempt the provider refused (ProviderRejected), followed
# by the provider's own code; cut to the column's width.
REJECTED_BY_PROVIDER = "provider-rejected"
FAILURE_CODE_MAX = Payment._meta.get_field("failure_code").max_length or 64


class PayPoint(RecoveryPoint):
    PAYMENT_CREATED = "payment_created"
    CHARGE_PREPARED = "charge_prepared"  # only for a provider that PreparesCharges


def order_pay_flow(
    record: IdempotencyKey, *, user_id: int, order_number: str, provider: PaymentProvider
) -> None:
    while True:
        match record.recovery_point:
            case PayPoint.STARTED:
                _settle_earlier_attempts(
                    user_id=user_id, order_number=order_number, provider=provider
                )
                atomic_phase(record, lambda: _start(user_id=user_id, order_number=order_number))
            case PayPoint.PAYMENT_CREATED if isinstance(provider, PreparesCharges):
                payment_id = record.resource_id
                assert payment_id is not None
                _prepare_charge(record, payment_id=payment_id, provider=provider)
            case PayPoint.PAYMENT_CREATED | PayPoint.CHARGE_PREPARED:
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


def _settle_earlier_attempts(*, user_id: int, order_number: str, provider: PaymentProvider) -> None:
    """Before a new attempt at an order's money, ask the provider about the earlier
    ones that failed, and settle what it says. Outside any transaction.

    A decline is final for an attempt's answer, not for the money: an asynchronous
    method declined now may be paid later (and a fence cannot recall it). If the
    provider has since captured an earlier attempt, ``capture_orphan_resolve``
    decides as everywhere else: the order is UNPAID with nothing live, so it
    rolls forward and is PAID through that attempt; phase one then finds it paid
    and the answer is the contract's 409 ``order-not-payable`` (stored, like any
    pay of a paid order): this request paid nothing, so it never answers 200 for
    a payment it did not make, and no second charge is ever sent. The client
    reads the order to see it PAID. Provider unreachable: 503
    ``payment-outcome-unknown`` (nothing stored, nothing charged; a retry with
    the same key asks again), rather than a new charge beside one that may yet
    succeed.
    """
    order = Order.objects.filter(number=order_number, user_id=user_id, status=Order.Status.UNPAID)
    # A fenced attempt (closed at the provider) cannot be captured any more: never
    # asked about. The others newest first, as many as the key's lock has room for
    # (payments.earlier: the asks, our own charge and a margin stay within
    # IDEMPOTENCY_LOCK_TIMEOUT at PROVIDER_TIMEOUT_S each); an older one's late
    # capture still reaches the reconciler by notification or statement.
    failed = Payment.objects.filter(order=OuterRef("pk"), status=PaymentStatus.FAILED)
    if not order.filter(Exists(failed)).exists():
        return  # the common case, an order's first attempt: one cheap read, nothing to ask
    can_succeed_late = (
        Payment.objects.filter(order__in=order, status=PaymentStatus.FAILED)
        .exclude(failure_code=CLOSED_BY_RECONCILIATION)
        .order_by("-pk")[:MAX_EARLIER_ASKED]
    )
    for payment in within_lock_budget(list(can_succeed_late)):
        try:
            account = provider.query(out_trade_no=payment.out_trade_no)
        except ProviderOutcomeUnknown as error:
            raise PaymentOutcomeUnknown(reason=str(error)) from error
        if account is not None and account.status is ChargeStatus.SUCCESS:
            capture_orphan_resolve(payment_id=payment.pk, capture=account)


def _start(*, user_id: int, order_number: str) -> MoveTo:
    payment = payment_create(user_id=user_id, order_number=order_number)
    return MoveTo(PayPoint.PAYMENT_CREATED, resource_type="payment", resource_id=payment.pk)


def _prepare_charge(record: IdempotencyKey, *, payment_id: int, provider: PreparesCharges) -> None:
    """Create the attempt at the provider (outside any transaction), then commit its
    id in a phase of its own: the charge_prepared recovery point.

    Creating moves no money, so a lost answer here is not an unknown outcome of a
    charge: the attempt stays PENDING at payment_created, and a retry creates again
    with the same derived key (the provider replays). A refusal moves nothing
    either: the attempt is declined with the provider's code, as a refused charge is.
    """
    payment = Payment.objects.get(pk=payment_id)
    context.bind(out_trade_no=payment.out_trade_no)
    provider_id = payment.trade_no
    if payment.status == PaymentStatus.PENDING and provider_id is None:
        try:
            provider_id = provider.prepare_charge(
                out_trade_no=payment.out_trade_no,
                amount=payment.amount,
                currency=payment.currency,
                idempotency_key=provider_idempotency_key(payment),
            )
        except ProviderRejected as rejection:
            refused = _refused(payment, rejection)
            atomic_phase(record, partial(_finish, payment_id=payment_id, result=refused))
            return
        except ProviderOutcomeUnknown as error:
            raise PaymentOutcomeUnknown(reason=str(error)) from error
    atomic_phase(record, partial(_record_prepared, payment_id=payment_id, provider_id=provider_id))


def _record_prepared(*, payment_id: int, provider_id: str | None) -> MoveTo:
    if provider_id is not None:
        # Only into an empty trade_no: a settled attempt keeps the id it settled with.
        Payment.objects.filter(pk=payment_id, trade_no__isnull=True).update(trade_no=provider_id)
    return MoveTo(PayPoint.CHARGE_PREPARED, resource_type="payment", resource_id=payment_id)


def _ask_provider(*, payment_id: int, provider: PaymentProvider) -> ChargeResult | None:
    """The provider's account of the attempt; None if it is settled already.

    Runs outside any transaction: holding row locks (or a connection in a
    transaction) while waiting on a third party would stall everyone else.
    """
    payment = Payment.objects.get(pk=payment_id)
    context.bind(out_trade_no=payment.out_trade_no)  # the provider's name for this attempt
    if payment.status not in (PaymentStatus.PENDING, PaymentStatus.UNKNOWN):
        return None  # a notification or the reconciler settled it while we were away
    asked_before = payment.status == PaymentStatus.UNKNOWN or payment.action_required_at is not None
    try:
        if asked_before:
            # We asked before and got no answer, or the provider waits for the
            # customer: find out before asking again. (The derived key would make a
            # second charge a replay, of the first answer; asking first also sees
            # what the customer did since, and respects a fence the reconciler may
            # have put up.)
            known = provider.query(out_trade_no=payment.out_trade_no)
            if known is not None:
                return known
        return provider.charge(
            out_trade_no=payment.out_trade_no,
            amount=payment.amount,
            currency=payment.currency,
            payer=payment.payer,
            notify_url=settings.SHOP_BASE_URL + reverse(provider.callback_route),
            idempotency_key=provider_idempotency_key(payment),
        )
    except CustomerActionRequired as waiting:
        # Nothing moved yet, and nothing is stored: the attempt stays PENDING, marked,
        # and the same key asks again (202 until it settles).
        payment_mark_action_required(payment_id=payment.pk)
        raise PaymentActionRequired(
            payment=payment.out_trade_no, action=waiting.action
        ) from waiting
    except ProviderRejected as rejection:
        if asked_before:
            # This request moved nothing, but an earlier one for the attempt went
            # unanswered and may still be in flight at the provider: no proof.
            # The reconciler fences the attempt before it fails it.
            raise PaymentOutcomeUnknown(reason=str(rejection)) from rejection
        # No earlier request went unanswered (or one crashed unanswered with the same
        # body, which the provider refuses the same way): nothing was charged. A
        # decline without a trade, final: asking again gets the same refusal.
        return _refused(payment, rejection)
    except ProviderOutcomeUnknown as error:
        payment_mark_unknown(payment_id=payment.pk)
        raise PaymentOutcomeUnknown(reason=str(error)) from error


def _refused(payment: Payment, rejection: ProviderRejected) -> ChargeResult:
    """A refusal as the decline it is: no trade, the provider's code in failure_code."""
    return ChargeResult(
        out_trade_no=payment.out_trade_no,
        status=ChargeStatus.DECLINED,
        trade_no=None,
        amount=None,
        currency=None,
        decline_reason=f"{REJECTED_BY_PROVIDER}:{rejection.code}"[:FAILURE_CODE_MAX],
    )


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
    body = partial(order_representation, order_id=payment.order_id)
    answer = pay_answer(payment, order_body=body)
    if answer is None:
        raise PaymentOutcomeUnknown()
    return answer


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
