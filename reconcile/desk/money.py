"""The desk's actions that may move money: ``refund`` and ``accept``, carried out now
(within ``DESK_APPROVAL_ABOVE``, or approved by a second person: ``approvals.py``).

- ``refund``: a capture for a reference the shop never used (an unknown
  notification, or an unknown statement line of a capture) is refunded the way
  the statement refunds it (``stray_capture_take``: only what the provider's
  query confirms; a stray refunded already is not refunded again);
- ``accept``: ask the provider about the attempt and settle from its answer,
  as the reconciler does (``payment_reconcile`` / ``refund_reconcile``); for a
  statement discrepancy, the provider's confirmed answer about the line's (or
  the ledger entry's) attempt is applied by the normal settle service
  (``payment_settle_from_account`` / ``refund_settle``), and the discrepancy resolved.

What moved money is recorded whoever closed the case first (``_moved``). When
the provider cannot answer, these raise ``ProviderOutcomeUnknown`` before
anything moved, and ``actions.case_act`` tells the person so.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from callbacks.models import ProviderNotification
from operations.statements.models import LineKind, StatementDiscrepancy
from payments.models import Payment, Refund
from payments.providers import PaymentProvider, ProviderOutcomeUnknown, get_provider
from reconcile.desk.actions import (
    ALREADY_RESOLVED,
    ActionResult,
    CaseActionRefused,
    close_case,
    close_subject,
    record_action,
)
from reconcile.desk.models import Case, CaseActionKind


def carry_out(
    case: Case,
    *,
    action: str,
    note: str,
    user: User,
    approved_by: User | None = None,
    provider: PaymentProvider | None = None,
) -> ActionResult:
    """Do a refund or accept now (approved, or within DESK_APPROVAL_ABOVE), as ``user``'s.
    Raises ProviderOutcomeUnknown when the provider cannot answer (nothing moved)."""
    provider = provider or get_provider()
    if action == CaseActionKind.REFUND:
        return _refund(case, note=note, user=user, approved_by=approved_by, provider=provider)
    return _accept(case, note=note, user=user, approved_by=approved_by, provider=provider)


def money_of(case: Case) -> int:
    """What a refund or accept on the case may move, in minor units (the approval rule's)."""
    if case.subject_type == "notification":
        return ProviderNotification.objects.get(pk=case.subject_id).amount
    if case.subject_type == "payment":
        return Payment.objects.get(pk=case.subject_id).amount
    if case.subject_type == "refund":
        return Refund.objects.get(pk=case.subject_id).amount
    discrepancy = StatementDiscrepancy.objects.select_related("line", "ledger_entry").get(
        pk=case.subject_id
    )
    if discrepancy.line is not None:
        return discrepancy.line.amount
    return discrepancy.ledger_entry.amount if discrepancy.ledger_entry is not None else 0


def _moved(
    case: Case,
    *,
    action: str,
    note: str,
    user: User,
    approved_by: User | None,
    outcome: str,
    subject_reason: str,
) -> ActionResult:
    """Record an action that moved money, and close its case if still open: one transaction.

    Recorded whoever closed the case first: the money moved either way. A case
    closed meanwhile (another person's dismiss, the machine) keeps its resolution,
    and the record says what this action did beside it. Closed by the same action
    (a double click, two people at once): that one recorded the money, and this
    one moved none more (one stray refund per capture, settlements conditional).
    """
    with transaction.atomic():
        closed = close_case(case, action=action, note=note, user=user)
        if closed:
            close_subject(case, reason=subject_reason, user=user)
        else:
            earlier = Case.objects.values_list("resolution", flat=True).get(pk=case.pk)
            if earlier.startswith(f"{action} by "):
                return ActionResult(False, f"case {case.pk} is {ALREADY_RESOLVED}")
            outcome = f"{outcome}; the case was closed meanwhile ({earlier})"
        record_action(
            case, action=action, note=note, user=user, outcome=outcome, approved_by=approved_by
        )
    return ActionResult(True, f"case {case.pk}: {outcome}")


def _refund(
    case: Case,
    *,
    note: str,
    user: User,
    approved_by: User | None,
    provider: PaymentProvider,
) -> ActionResult:
    from reconcile.recovery.strays import capture_is_an_attempts_own, stray_capture_take

    out_trade_no, trade_no = _capture_of(case)
    if capture_is_an_attempts_own(out_trade_no=out_trade_no, trade_no=trade_no):
        # Not asked: an attempt of ours holds this capture, and its own reconciliation
        # settles it (rolls forward, or books and refunds an orphaned capture).
        outcome = f"{out_trade_no} is an attempt of ours: its reconciliation settles it"
        with transaction.atomic():
            record_action(
                case,
                action=CaseActionKind.REFUND,
                note=note,
                user=user,
                approved_by=approved_by,
                outcome=outcome,
            )
        return ActionResult(False, f"case {case.pk}: {outcome}; the provider was not asked")
    # Idempotent at the provider and here (one stray per charge): a second click that
    # gets this far refunds nothing more. ProviderOutcomeUnknown: nothing moved.
    stray = stray_capture_take(out_trade_no=out_trade_no, trade_no=trade_no, provider=provider)
    if stray is None:
        with transaction.atomic():
            record_action(
                case,
                action=CaseActionKind.REFUND,
                note=note,
                user=user,
                approved_by=approved_by,
                outcome=f"asked the provider about {trade_no}: no such capture; nothing refunded",
            )
        return ActionResult(
            False,
            f"case {case.pk}: asked the provider about {trade_no}: it holds no such "
            "capture; nothing refunded",
        )
    outcome = f"stray capture {stray.trade_no} refund {stray.refund_status}"
    return _moved(
        case,
        action=CaseActionKind.REFUND,
        note=note,
        user=user,
        approved_by=approved_by,
        outcome=outcome,
        subject_reason=f"refunded by {user.get_username()} (case {case.pk}): {outcome}",
    )


def _capture_of(case: Case) -> tuple[str, str]:
    """(out_trade_no, trade_no) of the capture a refund case is about."""
    if case.subject_type == "notification":
        notification = ProviderNotification.objects.get(pk=case.subject_id)
        return notification.out_trade_no, notification.trade_no
    line = StatementDiscrepancy.objects.select_related("line").get(pk=case.subject_id).line
    if line is None or line.kind != LineKind.CHARGE:
        # A refund line for a reference never ours gave money back: nothing to refund.
        raise CaseActionRefused(f"case {case.pk} is not about a capture: nothing to refund")
    return line.reference, line.provider_id


def _accept(
    case: Case,
    *,
    note: str,
    user: User,
    approved_by: User | None,
    provider: PaymentProvider,
) -> ActionResult:
    from reconcile.desk.discrepancy_accept import discrepancy_accept
    from reconcile.recovery.unsettled_payments import (
        SETTLED,
        AskedAhead,
        payment_ask,
        payment_reconcile,
    )
    from reconcile.recovery.unsettled_refunds import SETTLED as REFUND_SETTLED
    from reconcile.recovery.unsettled_refunds import RefundResolution, refund_reconcile

    # The reconciler's own path: ask the provider, settle from its answer (conditional,
    # so a pass running beside this settles the attempt once). ProviderOutcomeUnknown
    # (or CustomerActionRequired) from the asking: nothing moved, and case_act says so.
    if case.subject_type == "discrepancy":
        settled, outcome = discrepancy_accept(
            StatementDiscrepancy.objects.select_related("line", "ledger_entry").get(
                pk=case.subject_id
            ),
            provider=provider,
        )
    elif case.subject_type == "payment":
        payment = Payment.objects.get(pk=case.subject_id)
        # Asked first, outside the reconciler's bookkeeping: an unreachable provider or
        # a customer who still has time raises here, before anything is written.
        answer = payment_ask(payment, provider)
        resolution = payment_reconcile(payment=payment, provider=AskedAhead(provider, answer)).value
        settled, outcome = resolution in SETTLED, f"the provider's word: {resolution}"
    else:
        refund_resolution = refund_reconcile(
            refund=Refund.objects.get(pk=case.subject_id), provider=provider
        )
        if refund_resolution is RefundResolution.UNREACHABLE:
            raise ProviderOutcomeUnknown("the provider did not answer about the refund")
        resolution = refund_resolution.value
        settled, outcome = resolution in REFUND_SETTLED, f"the provider's word: {resolution}"
    if not settled:
        with transaction.atomic():
            record_action(
                case,
                action=CaseActionKind.ACCEPT,
                note=note,
                user=user,
                approved_by=approved_by,
                outcome=outcome,
            )
        return ActionResult(False, f"case {case.pk}: {outcome}; still open")
    # A discrepancy is resolved with its case (an attempt settled itself, above).
    return _moved(
        case,
        action=CaseActionKind.ACCEPT,
        note=note,
        user=user,
        approved_by=approved_by,
        outcome=outcome,
        subject_reason=f"accepted by {user.get_username()} (case {case.pk}): {outcome}",
    )
