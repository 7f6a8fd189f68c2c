"""A person's actions on a case: what the machine would do, done now, with a reason.

- ``retry``: make the subject due at once (its backoff cleared); the next pass
  takes it through the job's own path, and the case closes when it settles;
- ``refund`` and ``accept``: what the machine would do with a capture or an
  attempt, on the provider's confirmed word (``money.py``);
- ``dismiss``: nothing to do; the case and its subject are closed with the reason.
  An unresolved attempt still unresolved ``CASE_AFTER_S`` after its case was
  dismissed is a new case (services.py): a dismiss never hides a problem for ever.

Each action needs its own permission on Case (``PERMISSIONS``), held by a real
user. A refund or accept that may move more than ``DESK_APPROVAL_ABOVE`` is not
carried out at once: it waits for a second person (``approvals.py``).

A double click acts once: every action that closes a case is a conditional
update on ``state = open`` in the transaction that records it, so of two
clicks one records the action and the other is told the case is resolved. An
action that moved money (a refund made, an attempt settled) is recorded whether
or not its close won: another person's dismiss, or the machine, may have closed
the case meanwhile, and the record says so. When the provider cannot answer,
nothing moved and nothing is recorded: the person is told to try again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from callbacks.models import ProviderNotification
from operations.statements.models import StatementDiscrepancy
from payments.models import UNSETTLED_REFUND_STATUSES, UNSETTLED_STATUSES, Payment, Refund
from payments.providers import (
    CustomerActionRequired,
    PaymentProvider,
    ProviderOutcomeUnknown,
)
from reconcile.desk.models import (
    PERMISSIONS,
    Case,
    CaseAction,
    CaseActionKind,
    CaseKind,
    CaseState,
    ItemFailure,
)

logger = logging.getLogger(__name__)

# The actions that fit each kind of case (the admin and /books/ offer these).
ACTIONS: dict[str, tuple[str, ...]] = {
    CaseKind.UNKNOWN_NOTIFICATION: (CaseActionKind.REFUND, CaseActionKind.DISMISS),
    CaseKind.UNKNOWN_LINE: (CaseActionKind.REFUND, CaseActionKind.DISMISS),
    CaseKind.DISCREPANCY: (CaseActionKind.ACCEPT, CaseActionKind.DISMISS),
    # Dismissed, it stays a fault in the audit (nobody holds it), and comes back as a
    # new case CASE_AFTER_S later if it is still unresolved then.
    CaseKind.UNRESOLVED: (CaseActionKind.RETRY, CaseActionKind.ACCEPT, CaseActionKind.DISMISS),
    CaseKind.ITEM_FAILED: (CaseActionKind.RETRY, CaseActionKind.DISMISS),
    # The money is back with the shop: a person refunds the order again (the API, as
    # staff) or settles it with the customer, and closes the case with what was done.
    CaseKind.REFUND_REVERSED: (CaseActionKind.DISMISS,),
    # Answered at the provider (evidence); closes itself when the dispute closes.
    CaseKind.DISPUTE: (CaseActionKind.DISMISS,),
    CaseKind.CONTRADICTED: (CaseActionKind.DISMISS,),
}

ALREADY_RESOLVED = "already resolved"


# The actions that may move money: above DESK_APPROVAL_ABOVE, a second person approves.
MOVES_MONEY = (CaseActionKind.REFUND, CaseActionKind.ACCEPT)


class CaseActionRefused(ValueError):
    """The action does not fit this case, or it came without a reason."""


class CaseActionForbidden(CaseActionRefused):
    """The person does not hold the action's permission (or approves their own request)."""


@dataclass(frozen=True)
class ActionResult:
    """What an action did: ``acted`` False when the case was resolved already."""

    acted: bool
    message: str


def case_act(
    *,
    case_id: int,
    action: str,
    note: str,
    user: User,
    provider: PaymentProvider | None = None,
) -> ActionResult:
    """Take ``action`` on the case as ``user``, recorded with who and why. See the module doc."""
    from reconcile.desk.approvals import approval_request, case_approve
    from reconcile.desk.money import carry_out, money_of

    note = note.strip()
    if not note:
        raise CaseActionRefused("say why")
    case = Case.objects.get(pk=case_id)
    permission = PERMISSIONS.get(action)
    if permission is None:
        raise CaseActionRefused(f"unknown action {action}")
    if not user.has_perm(permission):
        raise CaseActionForbidden(f"{user.get_username()} may not {action} cases ({permission})")
    try:
        if action == CaseActionKind.APPROVE:
            return case_approve(case, note=note, user=user, provider=provider)
        if case.state != CaseState.OPEN:
            return ActionResult(False, f"case {case.pk} is {ALREADY_RESOLVED}")
        if action not in ACTIONS[case.kind]:
            raise CaseActionRefused(f"a {case.kind} case offers {', '.join(ACTIONS[case.kind])}")
        match action:
            case CaseActionKind.DISMISS:
                return _dismiss(case, note=note, user=user)
            case CaseActionKind.RETRY:
                return _retry(case, note=note, user=user)
        amount = money_of(case)
        if amount > settings.DESK_APPROVAL_ABOVE:
            return approval_request(case, action=action, amount=amount, note=note, user=user)
        return carry_out(case, action=action, note=note, user=user, provider=provider)
    except CustomerActionRequired:
        return ActionResult(
            False,
            f"case {case.pk}: the provider waits for the customer to act; nothing done "
            "(the reconciler closes the attempt once PAYMENT_ACTION_TIMEOUT_S has passed)",
        )
    except ProviderOutcomeUnknown as error:
        # Nothing moved and nothing is recorded: asking again later is the whole remedy.
        return ActionResult(
            False, f"case {case.pk}: the provider did not answer ({error}); nothing done, try again"
        )


def close_case(case: Case, *, action: str, note: str, user: User) -> bool:
    """Resolve the case if still open, in the caller's transaction; whether this closed it."""
    return bool(
        Case.objects.filter(pk=case.pk, state=CaseState.OPEN).update(
            state=CaseState.RESOLVED,
            resolved_at=timezone.now(),
            resolved_by=user,
            resolution=f"{action} by {user.get_username()}: {note}",
        )
    )


def record_action(
    case: Case,
    *,
    action: str,
    note: str,
    user: User,
    outcome: str,
    approved_by: User | None = None,
) -> None:
    CaseAction.objects.create(
        case=case,
        action=action,
        by=user,
        by_name=user.get_username(),
        approved_by=approved_by,
        note=note,
        outcome=outcome,
    )


def _dismiss(case: Case, *, note: str, user: User) -> ActionResult:
    from reconcile.desk.approvals import approvals_close

    who = user.get_username()
    with transaction.atomic():
        if not close_case(case, action=CaseActionKind.DISMISS, note=note, user=user):
            return ActionResult(False, f"case {case.pk} is {ALREADY_RESOLVED}")
        record_action(
            case, action=CaseActionKind.DISMISS, note=note, user=user, outcome="dismissed"
        )
        approvals_close(case)  # a request awaiting approval dies with its case
        if case.kind == CaseKind.ITEM_FAILED:
            # The failure is dismissed, not the item: its job counts afresh (failing on,
            # it comes back as a case), and the subject stays what it is. A notification
            # about an attempt of ours is settled only when that attempt is; until then
            # it is the audit's fault, honestly, with nobody holding it.
            ItemFailure.objects.filter(job=case.job, key=str(case.subject_id)).delete()
        else:
            # The subject is closed with the case, in the same transaction: the audit
            # reads it settled, with the person's reason.
            close_subject(case, reason=f"dismissed by {who} (case {case.pk}): {note}", user=user)
    logger.info("case %s dismissed by %s: %s", case.pk, who, note)
    return ActionResult(True, f"case {case.pk} dismissed")


def close_subject(case: Case, *, reason: str, user: User | None) -> None:
    if case.subject_type == "notification":
        ProviderNotification.objects.filter(pk=case.subject_id, resolved_at__isnull=True).update(
            resolved_at=timezone.now(), resolution=reason
        )
    elif case.subject_type == "discrepancy":
        StatementDiscrepancy.objects.filter(pk=case.subject_id, resolved_at__isnull=True).update(
            resolved_at=timezone.now(), resolved_by=user, resolution=reason
        )


def _retry(case: Case, *, note: str, user: User) -> ActionResult:
    # Not closing: the case closes when the item settles. Once-only: the case row is
    # locked and re-read in the transaction that records the action, and each write
    # is conditional on the subject not being due yet; of two clicks, the second
    # finds it resolved or already due and records nothing. The clock is read after
    # the lock: a second click that read it before waiting would see the first
    # click's "now" as still in the future, and make the item due a second time.
    with transaction.atomic():
        if not Case.objects.select_for_update().filter(pk=case.pk, state=CaseState.OPEN).exists():
            return ActionResult(False, f"case {case.pk} is {ALREADY_RESOLVED}")
        now = timezone.now()
        jobs = [case.job] if case.job else _jobs_of(case)
        made_due = ItemFailure.objects.filter(
            key=str(case.subject_id), job__in=jobs, next_try_at__gt=now
        ).update(next_try_at=now)
        if case.subject_type == "payment":
            made_due += Payment.objects.filter(
                pk=case.subject_id, status__in=UNSETTLED_STATUSES, next_reconcile_at__isnull=False
            ).update(next_reconcile_at=None)
        elif case.subject_type == "refund":
            made_due += Refund.objects.filter(
                pk=case.subject_id,
                status__in=UNSETTLED_REFUND_STATUSES,
                next_reconcile_at__isnull=False,
            ).update(next_reconcile_at=None)
        if not made_due:
            return ActionResult(False, f"case {case.pk}: already due at the next pass")
        record_action(case, action=CaseActionKind.RETRY, note=note, user=user, outcome="due now")
    return ActionResult(True, f"case {case.pk}: due at the next pass")


def _jobs_of(case: Case) -> list[str]:
    from reconcile.desk.isolation import JOBS_BY_SUBJECT

    return JOBS_BY_SUBJECT.get(case.subject_type, [])
