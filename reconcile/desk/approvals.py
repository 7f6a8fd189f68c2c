"""Four eyes on the desk's money: a refund or accept that may move more than
``DESK_APPROVAL_ABOVE`` (minor units; 0: every one) is asked for by one person and
carried out only when a second person, holding ``approve_case``, approves it.

- ``approval_request``: the request is a ``CaseApproval`` (one pending per case, by
  a partial unique index: a double click asks once) and a line in the case's
  history; nothing moves yet.
- ``case_approve``: claims the pending request by a conditional UPDATE (a double
  click approves once), refuses the requester's own (the table's CHECK says so
  too), then carries the action out as the requester's, through the same service
  as any other (``money.carry_out``), the approver recorded beside them. If the
  provider cannot answer, nothing moved: the request is pending again.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from payments.providers import PaymentProvider, ProviderOutcomeUnknown
from reconcile.desk.actions import ALREADY_RESOLVED, ActionResult, CaseActionForbidden
from reconcile.desk.models import Case, CaseAction, CaseActionKind, CaseApproval, CaseState
from reconcile.desk.money import carry_out

AWAITING = "awaiting a second person's approval"


def approval_request(
    case: Case, *, action: str, amount: int, note: str, user: User
) -> ActionResult:
    """Ask for a refund or accept that needs a second person; nothing moves yet."""
    try:
        with transaction.atomic():
            CaseApproval.objects.create(
                case=case, action=action, amount=amount, requested_by=user, note=note
            )
            CaseAction.objects.create(
                case=case,
                action=action,
                by=user,
                by_name=user.get_username(),
                note=note,
                outcome=f"asked for; {AWAITING} ({amount} above DESK_APPROVAL_ABOVE)",
            )
    except IntegrityError:
        pending = CaseApproval.objects.select_related("requested_by").get(
            case=case, state=CaseApproval.State.PENDING
        )
        return ActionResult(
            False,
            f"case {case.pk}: a {pending.action} asked for by "
            f"{pending.requested_by.get_username()} is {AWAITING} already",
        )
    return ActionResult(False, f"case {case.pk}: {action} of {amount} is {AWAITING}")


def case_approve(
    case: Case, *, note: str, user: User, provider: PaymentProvider | None
) -> ActionResult:
    """Approve the case's pending request and carry it out (see the module doc)."""
    pending = CaseApproval.objects.filter(case=case, state=CaseApproval.State.PENDING).first()
    if pending is None:
        return ActionResult(False, f"case {case.pk}: nothing awaits approval")
    if pending.requested_by_id == user.pk:
        raise CaseActionForbidden(
            f"{user.get_username()} asked for this {pending.action}: a second person approves it"
        )
    if case.state != CaseState.OPEN:
        approvals_close(case)
        return ActionResult(False, f"case {case.pk} is {ALREADY_RESOLVED}; nothing done")
    # WHERE state = 'pending': of two approvers (or two clicks), one carries it out.
    claimed = CaseApproval.objects.filter(pk=pending.pk, state=CaseApproval.State.PENDING).update(
        state=CaseApproval.State.APPROVED, approved_by=user, decided_at=timezone.now()
    )
    if not claimed:
        return ActionResult(False, f"case {case.pk}: approved already")
    requester = User.objects.get(pk=pending.requested_by_id)
    try:
        result = carry_out(
            case,
            action=pending.action,
            note=pending.note,
            user=requester,
            approved_by=user,
            provider=provider,
        )
    except ProviderOutcomeUnknown:
        # Nothing moved: the request waits again, for this approver or another.
        CaseApproval.objects.filter(pk=pending.pk, state=CaseApproval.State.APPROVED).update(
            state=CaseApproval.State.PENDING, approved_by=None, decided_at=None
        )
        raise
    CaseAction.objects.create(
        case=case,
        action=CaseActionKind.APPROVE,
        by=user,
        by_name=user.get_username(),
        note=note,
        outcome=f"approved {pending.action} by {requester.get_username()}: {result.message}",
    )
    return result


def approvals_close(case: Case) -> int:
    """A case closed before its request was approved: the request closes with it."""
    return CaseApproval.objects.filter(case=case, state=CaseApproval.State.PENDING).update(
        state=CaseApproval.State.CLOSED, decided_at=timezone.now()
    )


def case_awaiting_approval(case_ids: list[int]) -> set[int]:
    """Of these cases, those with a request awaiting approval (offered ``approve``)."""
    return set(
        CaseApproval.objects.filter(
            case_id__in=case_ids, state=CaseApproval.State.PENDING
        ).values_list("case_id", flat=True)
    )
