"""A person's actions on a case: what the machine would do, done now, with a reason.

- ``retry``: make the subject due at once (its backoff cleared); the next pass
  takes it through the job's own path, and the case closes when it settles;
- ``refund``: a capture for a reference the shop never used (an unknown
  notification, or an unknown statement line of a capture) is refunded the way
  the statement refunds it (``stray_capture_take``: only what the provider's
  query confirms; a stray refunded already is not refunded again);
- ``accept``: ask the provider about the attempt and settle from its answer,
  as the reconciler does (``payment_reconcile`` / ``refund_reconcile``); for a
  statement discrepancy, the provider's confirmed answer about the line's (or
  the ledger entry's) attempt is applied by the normal settle service
  (``payment_apply_truth`` / ``refund_settle``), and the discrepancy resolved;
- ``dismiss``: nothing to do; the case and its subject are closed with the reason.

A double click acts once: every action that closes a case is a conditional
update on ``state = open`` in the transaction that records it, so of two
clicks one records the action and the other is told the case is resolved.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from callbacks.models import ProviderNotification
from payments.models import UNSETTLED_REFUND_STATUSES, UNSETTLED_STATUSES, Payment, Refund
from payments.providers import (
    PaymentProvider,
    ProviderOutcomeUnknown,
    get_provider,
)
from reconcile.desk.models import Case, CaseAction, CaseActionKind, CaseKind, CaseState, ItemFailure
from reconcile.models import LineKind, StatementDiscrepancy

logger = logging.getLogger(__name__)

# The actions that fit each kind of case (the admin and /books/ offer these).
ACTIONS: dict[str, tuple[str, ...]] = {
    CaseKind.UNKNOWN_NOTIFICATION: (CaseActionKind.REFUND, CaseActionKind.DISMISS),
    CaseKind.UNKNOWN_LINE: (CaseActionKind.REFUND, CaseActionKind.DISMISS),
    CaseKind.DISCREPANCY: (CaseActionKind.ACCEPT, CaseActionKind.DISMISS),
    # Dismissed, it stays a fault in the audit (nobody holds it), and is not reopened.
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


class CaseActionRefused(ValueError):
    """The action does not fit this case, or it came without a reason."""


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
    user: User | None = None,
    by_name: str = "",
    provider: PaymentProvider | None = None,
) -> ActionResult:
    """Take ``action`` on the case, recorded with who and why. See the module doc."""
    note = note.strip()
    if not note:
        raise CaseActionRefused("say why")
    case = Case.objects.get(pk=case_id)
    if case.state != CaseState.OPEN:
        return ActionResult(False, f"case {case.pk} is {ALREADY_RESOLVED}")
    if action not in ACTIONS[case.kind]:
        raise CaseActionRefused(f"a {case.kind} case offers {', '.join(ACTIONS[case.kind])}")
    who = by_name or (user.get_username() if user is not None else "") or "unknown"
    match action:
        case CaseActionKind.DISMISS:
            return _dismiss(case, note=note, user=user, who=who)
        case CaseActionKind.RETRY:
            return _retry(case, note=note, user=user, who=who)
        case CaseActionKind.REFUND:
            return _refund(case, note=note, user=user, who=who, provider=provider)
        case CaseActionKind.ACCEPT:
            return _accept(case, note=note, user=user, who=who, provider=provider)
    raise CaseActionRefused(f"unknown action {action}")  # pragma: no cover


def _close(
    case: Case, *, action: str, note: str, user: User | None, who: str, outcome: str
) -> bool:
    """Resolve the case if still open and record the action, in the caller's transaction."""
    closed = Case.objects.filter(pk=case.pk, state=CaseState.OPEN).update(
        state=CaseState.RESOLVED,
        resolved_at=timezone.now(),
        resolved_by=user,
        resolution=f"{action} by {who}: {note}",
    )
    if closed:
        _record(case, action=action, note=note, user=user, who=who, outcome=outcome)
    return bool(closed)


def _record(
    case: Case, *, action: str, note: str, user: User | None, who: str, outcome: str
) -> None:
    CaseAction.objects.create(
        case=case, action=action, by=user, by_name=who, note=note, outcome=outcome
    )


def _dismiss(case: Case, *, note: str, user: User | None, who: str) -> ActionResult:
    with transaction.atomic():
        if not _close(
            case, action=CaseActionKind.DISMISS, note=note, user=user, who=who, outcome="dismissed"
        ):
            return ActionResult(False, f"case {case.pk} is {ALREADY_RESOLVED}")
        if case.kind == CaseKind.ITEM_FAILED:
            # The failure is dismissed, not the item: its job counts afresh (failing on,
            # it comes back as a case), and the subject stays what it is. A notification
            # about an attempt of ours is settled only when that attempt is; until then
            # it is the audit's fault, honestly, with nobody holding it.
            ItemFailure.objects.filter(job=case.job, key=str(case.subject_id)).delete()
        else:
            # The subject is closed with the case, in the same transaction: the audit
            # reads it settled, with the person's reason.
            _dismiss_subject(case, reason=f"dismissed by {who} (case {case.pk}): {note}", user=user)
    logger.info("case %s dismissed by %s: %s", case.pk, who, note)
    return ActionResult(True, f"case {case.pk} dismissed")


def _dismiss_subject(case: Case, *, reason: str, user: User | None) -> None:
    if case.subject_type == "notification":
        ProviderNotification.objects.filter(pk=case.subject_id, resolved_at__isnull=True).update(
            resolved_at=timezone.now(), resolution=reason
        )
    elif case.subject_type == "discrepancy":
        StatementDiscrepancy.objects.filter(pk=case.subject_id, resolved_at__isnull=True).update(
            resolved_at=timezone.now(), resolved_by=user, resolution=reason
        )


def _retry(case: Case, *, note: str, user: User | None, who: str) -> ActionResult:
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
        _record(case, action=CaseActionKind.RETRY, note=note, user=user, who=who, outcome="due now")
    return ActionResult(True, f"case {case.pk}: due at the next pass")


def _refund(
    case: Case,
    *,
    note: str,
    user: User | None,
    who: str,
    provider: PaymentProvider | None,
) -> ActionResult:
    from reconcile.recovery.strays import capture_is_an_attempts_own, stray_capture_take

    out_trade_no, trade_no = _capture_of(case)
    if capture_is_an_attempts_own(out_trade_no=out_trade_no, trade_no=trade_no):
        # Not asked: an attempt of ours holds this capture, and its own reconciliation
        # settles it (rolls forward, or books and refunds an orphaned capture).
        outcome = f"{out_trade_no} is an attempt of ours: its reconciliation settles it"
        with transaction.atomic():
            _record(
                case, action=CaseActionKind.REFUND, note=note, user=user, who=who, outcome=outcome
            )
        return ActionResult(False, f"case {case.pk}: {outcome}; the provider was not asked")
    try:
        # Idempotent at the provider and here (one stray per charge): a second click
        # that gets this far refunds nothing more.
        stray = stray_capture_take(
            out_trade_no=out_trade_no, trade_no=trade_no, provider=provider or get_provider()
        )
    except ProviderOutcomeUnknown as error:
        return ActionResult(
            False, f"case {case.pk}: the provider did not answer ({error}); try again"
        )
    if stray is None:
        with transaction.atomic():
            _record(
                case,
                action=CaseActionKind.REFUND,
                note=note,
                user=user,
                who=who,
                outcome=f"asked the provider about {trade_no}: no such capture; nothing refunded",
            )
        return ActionResult(
            False,
            f"case {case.pk}: asked the provider about {trade_no}: it holds no such "
            "capture; nothing refunded",
        )
    outcome = f"stray capture {stray.trade_no} refund {stray.refund_status}"
    with transaction.atomic():
        if not _close(
            case, action=CaseActionKind.REFUND, note=note, user=user, who=who, outcome=outcome
        ):
            return ActionResult(False, f"case {case.pk} is {ALREADY_RESOLVED}")
        _dismiss_subject(case, reason=f"refunded by {who} (case {case.pk}): {outcome}", user=user)
    return ActionResult(True, f"case {case.pk}: {outcome}")


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
    user: User | None,
    who: str,
    provider: PaymentProvider | None,
) -> ActionResult:
    from reconcile.desk.discrepancy_accept import discrepancy_accept
    from reconcile.recovery.unsettled_payments import SETTLED, payment_reconcile
    from reconcile.recovery.unsettled_refunds import SETTLED as REFUND_SETTLED
    from reconcile.recovery.unsettled_refunds import refund_reconcile

    provider = provider or get_provider()
    if case.subject_type == "discrepancy":
        try:
            settled, outcome = discrepancy_accept(
                StatementDiscrepancy.objects.select_related("line", "ledger_entry").get(
                    pk=case.subject_id
                ),
                provider=provider,
            )
        except ProviderOutcomeUnknown as error:
            return ActionResult(
                False, f"case {case.pk}: the provider did not answer ({error}); try again"
            )
    # The reconciler's own path: ask the provider, settle from its answer (conditional,
    # so a pass running beside this settles the attempt once).
    elif case.subject_type == "payment":
        resolution = payment_reconcile(
            payment=Payment.objects.get(pk=case.subject_id), provider=provider
        ).value
        settled, outcome = resolution in SETTLED, f"the provider's word: {resolution}"
    else:
        resolution = refund_reconcile(
            refund=Refund.objects.get(pk=case.subject_id), provider=provider
        ).value
        settled, outcome = resolution in REFUND_SETTLED, f"the provider's word: {resolution}"
    with transaction.atomic():
        if not settled:
            _record(
                case, action=CaseActionKind.ACCEPT, note=note, user=user, who=who, outcome=outcome
            )
            return ActionResult(False, f"case {case.pk}: {outcome}; still open")
        if not _close(
            case, action=CaseActionKind.ACCEPT, note=note, user=user, who=who, outcome=outcome
        ):
            return ActionResult(False, f"case {case.pk} is {ALREADY_RESOLVED}")
        # A discrepancy is resolved with its case (an attempt settled itself, above).
        _dismiss_subject(case, reason=f"accepted by {who} (case {case.pk}): {outcome}", user=user)
    return ActionResult(True, f"case {case.pk}: {outcome}")


def _jobs_of(case: Case) -> list[str]:
    from reconcile.desk.isolation import JOBS_BY_SUBJECT

    return JOBS_BY_SUBJECT.get(case.subject_type, [])
