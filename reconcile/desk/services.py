"""Opening cases, closing what the machine settled, and a person's actions on a case.

Opening is idempotent: ``INSERT ... ON CONFLICT DO NOTHING`` against the
partial unique index of open cases per subject, so every pass may find the
same matter again and still one case is open for it.

An action is what the machine would do, done now, by a person, with a reason:

- ``retry``: make the subject due at once (its backoff cleared); the next pass
  takes it through the job's own path;
- ``refund``: a capture for a reference the shop never used is refunded the way
  the statement refunds it (``stray_capture_take``: only what the provider's
  query confirms);
- ``accept``: ask the provider about the attempt and settle from its answer,
  as the reconciler does (``payment_reconcile`` / ``refund_reconcile``);
- ``dismiss``: nothing to do; the case and its subject are closed with the reason.

A double click acts once: every action that closes a case is a conditional
update on ``state = open`` in the transaction that records it, so of two
clicks one records the action and the other is told the case is resolved.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from callbacks.models import ProviderNotification
from payments.models import UNSETTLED_REFUND_STATUSES, UNSETTLED_STATUSES, Payment, Refund
from payments.providers import PaymentProvider, ProviderOutcomeUnknown, get_provider
from reconcile.desk.models import Case, CaseAction, CaseActionKind, CaseKind, CaseState, ItemFailure
from reconcile.models import StatementDiscrepancy

logger = logging.getLogger(__name__)

# The actions that fit each kind of case (the admin and /books/ offer these).
ACTIONS: dict[str, tuple[str, ...]] = {
    CaseKind.UNKNOWN_NOTIFICATION: (CaseActionKind.REFUND, CaseActionKind.DISMISS),
    CaseKind.UNKNOWN_LINE: (CaseActionKind.DISMISS,),
    CaseKind.DISCREPANCY: (CaseActionKind.DISMISS,),
    # Dismissed, it stays a fault in the audit (nobody holds it), and is not reopened.
    CaseKind.UNRESOLVED: (CaseActionKind.RETRY, CaseActionKind.ACCEPT, CaseActionKind.DISMISS),
    CaseKind.ITEM_FAILED: (CaseActionKind.RETRY, CaseActionKind.DISMISS),
}

ALREADY_RESOLVED = "already resolved"


class CaseActionRefused(ValueError):
    """The action does not fit this case, or it came without a reason."""


@dataclass(frozen=True)
class ActionResult:
    """What an action did: ``acted`` False when the case was resolved already."""

    acted: bool
    message: str


_OPEN = """
    INSERT INTO reconcile_case
        (kind, subject_type, subject_id, reference, summary, state, opened_at, resolution)
    VALUES (%s, %s, %s, %s, %s, %s, %s, '')
    ON CONFLICT DO NOTHING
    RETURNING id
"""


def case_open(
    *, kind: str, subject_type: str, subject_id: int, reference: str, summary: str
) -> int | None:
    """Open a case about the subject unless one is open already; its id if this opened it."""
    with connection.cursor() as cursor:
        cursor.execute(
            _OPEN,
            [
                kind,
                subject_type,
                subject_id,
                reference[:64],
                summary,
                CaseState.OPEN,
                timezone.now(),
            ],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    logger.warning("case %s opened: %s %s (%s)", row[0], kind, reference, summary)
    return int(row[0])


def case_close_by_machine(*, kind: str, subject_type: str, subject_id: int, resolution: str) -> int:
    """Close the subject's open case of ``kind``: the machine settled it after all."""
    return Case.objects.filter(
        kind=kind, subject_type=subject_type, subject_id=subject_id, state=CaseState.OPEN
    ).update(state=CaseState.RESOLVED, resolved_at=timezone.now(), resolution=resolution)


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
        # The subject is closed with the case, in the same transaction: the audit
        # reads it settled, with the person's reason.
        reason = f"dismissed by {who} (case {case.pk}): {note}"
        if case.subject_type == "notification":
            ProviderNotification.objects.filter(
                pk=case.subject_id, resolved_at__isnull=True
            ).update(resolved_at=timezone.now(), resolution=reason)
        elif case.subject_type == "discrepancy":
            StatementDiscrepancy.objects.filter(
                pk=case.subject_id, resolved_at__isnull=True
            ).update(resolved_at=timezone.now(), resolved_by=user, resolution=reason)
        # A failed item starts counting afresh: if it fails on, it comes back as a case.
        ItemFailure.objects.filter(key=str(case.subject_id), job__in=_jobs_of(case)).delete()
    logger.info("case %s dismissed by %s: %s", case.pk, who, note)
    return ActionResult(True, f"case {case.pk} dismissed")


def _retry(case: Case, *, note: str, user: User | None, who: str) -> ActionResult:
    # Not closing: the case closes when the item settles (the guard closes it). Making
    # a thing due now twice is making it due now once.
    now = timezone.now()
    with transaction.atomic():
        ItemFailure.objects.filter(key=str(case.subject_id), job__in=_jobs_of(case)).update(
            next_try_at=now
        )
        if case.subject_type == "payment":
            Payment.objects.filter(pk=case.subject_id, status__in=UNSETTLED_STATUSES).update(
                next_reconcile_at=None
            )
        elif case.subject_type == "refund":
            Refund.objects.filter(pk=case.subject_id, status__in=UNSETTLED_REFUND_STATUSES).update(
                next_reconcile_at=None
            )
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
    from reconcile.services.strays import stray_capture_take

    notification = ProviderNotification.objects.get(pk=case.subject_id)
    try:
        # Idempotent at the provider and here (one stray per charge): a second click
        # that gets this far refunds nothing more.
        stray = stray_capture_take(
            out_trade_no=notification.out_trade_no,
            trade_no=notification.trade_no,
            provider=provider or get_provider(),
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
                outcome="the provider confirms no such capture: nothing to refund",
            )
        return ActionResult(
            False, f"case {case.pk}: the provider confirms no capture; nothing refunded"
        )
    outcome = f"stray capture {stray.trade_no} refund {stray.refund_status}"
    with transaction.atomic():
        if not _close(
            case, action=CaseActionKind.REFUND, note=note, user=user, who=who, outcome=outcome
        ):
            return ActionResult(False, f"case {case.pk} is {ALREADY_RESOLVED}")
        ProviderNotification.objects.filter(pk=notification.pk, resolved_at__isnull=True).update(
            resolved_at=timezone.now(), resolution=f"refunded by {who} (case {case.pk}): {outcome}"
        )
    return ActionResult(True, f"case {case.pk}: {outcome}")


def _accept(
    case: Case,
    *,
    note: str,
    user: User | None,
    who: str,
    provider: PaymentProvider | None,
) -> ActionResult:
    from reconcile.services.payments import SETTLED, payment_reconcile
    from reconcile.services.refunds import SETTLED as REFUND_SETTLED
    from reconcile.services.refunds import refund_reconcile

    provider = provider or get_provider()
    # The reconciler's own path: ask the provider, settle from its answer (conditional,
    # so a pass running beside this settles the attempt once).
    if case.subject_type == "payment":
        resolution = payment_reconcile(
            payment=Payment.objects.get(pk=case.subject_id), provider=provider
        ).value
        settled = resolution in SETTLED
    else:
        resolution = refund_reconcile(
            refund=Refund.objects.get(pk=case.subject_id), provider=provider
        ).value
        settled = resolution in REFUND_SETTLED
    outcome = f"the provider's word: {resolution}"
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
    return ActionResult(True, f"case {case.pk}: {outcome}")


def _jobs_of(case: Case) -> list[str]:
    from reconcile.desk.isolation import JOBS_BY_SUBJECT

    return JOBS_BY_SUBJECT.get(case.subject_type, [])


# --- The beat job: open what time or the machine's findings make a case --------------


@dataclass(frozen=True)
class CaseCounts:
    opened: int = 0
    closed: int = 0  # cases whose subject the machine settled meanwhile


def cases_run_once() -> CaseCounts:
    """Open the cases that are due, and close those whose subject is settled."""
    return CaseCounts(opened=_open_due(), closed=_close_settled())


def _open_due() -> int:
    now = timezone.now()
    started_before = now - timedelta(seconds=settings.CASE_AFTER_S)
    opened = 0
    for payment in Payment.objects.filter(
        status__in=UNSETTLED_STATUSES, created_at__lt=started_before
    ).exclude(pk__in=_ever("payment")):
        opened += (
            case_open(
                kind=CaseKind.UNRESOLVED,
                subject_type="payment",
                subject_id=payment.pk,
                reference=payment.out_trade_no,
                summary=f"payment {payment.out_trade_no} of {payment.amount} {payment.currency} "
                f"still {payment.status} since {payment.created_at:%Y-%m-%d %H:%M} UTC, "
                f"after {payment.reconcile_attempts} tries",
            )
            is not None
        )
    for refund in Refund.objects.filter(
        status__in=UNSETTLED_REFUND_STATUSES, created_at__lt=started_before
    ).exclude(pk__in=_ever("refund")):
        opened += (
            case_open(
                kind=CaseKind.UNRESOLVED,
                subject_type="refund",
                subject_id=refund.pk,
                reference=refund.refund_no,
                summary=f"refund {refund.refund_no} of {refund.amount} {refund.currency} "
                f"still {refund.status} since {refund.created_at:%Y-%m-%d %H:%M} UTC",
            )
            is not None
        )
    opened += _open_unknown_notifications(now)
    for d in (
        StatementDiscrepancy.objects.filter(resolved_at__isnull=True)
        .exclude(pk__in=_held("discrepancy"))
        .select_related("line")
    ):
        unknown = (
            d.line is not None
            and d.kind in ("unknown-refund", "not-booked")
            and not (
                Payment.objects.filter(out_trade_no=d.line.reference).exists()
                or Refund.objects.filter(refund_no=d.line.reference).exists()
            )
        )
        opened += (
            case_open(
                kind=CaseKind.UNKNOWN_LINE if unknown else CaseKind.DISCREPANCY,
                subject_type="discrepancy",
                subject_id=d.pk,
                reference=d.line.reference if d.line else "",
                summary=f"statement {d.day}: {d.kind}: {d.reason}",
            )
            is not None
        )
    return opened


def _open_unknown_notifications(now: datetime) -> int:
    # Charge successes are the statement job's first (it asks the provider, and opens
    # the case itself when the provider does not confirm); everything else unmatched
    # (a closed charge, a refund of a reference never ours) has nothing the machine
    # can do, and is a case once the reconciler had its time.
    due_before = now - timedelta(seconds=settings.RECONCILE_AFTER_S)
    unmatched = (
        ProviderNotification.objects.filter(
            outcome=ProviderNotification.Outcome.UNMATCHED,
            resolved_at__isnull=True,
            received_at__lt=due_before,
        )
        .exclude(event=ProviderNotification.Event.CHARGE, trade_status="SUCCESS")
        .exclude(pk__in=_held("notification"))
    )
    return sum(notification_case_open(notification=n) is not None for n in unmatched)


def notification_case_open(*, notification: ProviderNotification, why: str = "") -> int | None:
    """A case for a notification about a reference the shop never used."""
    reference = notification.out_refund_no or notification.out_trade_no
    return case_open(
        kind=CaseKind.UNKNOWN_NOTIFICATION,
        subject_type="notification",
        subject_id=notification.pk,
        reference=reference,
        summary=f"notification {notification.notify_id}: {notification.event} {reference} "
        f"{notification.trade_status} {notification.amount} "
        f"{notification.currency}, for a reference the shop never used"
        + (f"; {why}" if why else ""),
    )


def _held(subject_type: str) -> QuerySet[Case, Any]:
    return Case.objects.filter(subject_type=subject_type, state=CaseState.OPEN).values("subject_id")


def _ever(subject_type: str) -> QuerySet[Case, Any]:
    # An unresolved attempt is a case once: one a person dismissed is not reopened.
    return Case.objects.filter(subject_type=subject_type, kind=CaseKind.UNRESOLVED).values(
        "subject_id"
    )


def _close_settled() -> int:
    closed = 0
    now = timezone.now()
    open_ = Case.objects.filter(state=CaseState.OPEN)
    for subject_type, settled in (
        ("payment", Payment.objects.exclude(status__in=UNSETTLED_STATUSES)),
        ("refund", Refund.objects.exclude(status__in=UNSETTLED_REFUND_STATUSES)),
        ("notification", ProviderNotification.objects.filter(resolved_at__isnull=False)),
        ("discrepancy", StatementDiscrepancy.objects.filter(resolved_at__isnull=False)),
    ):
        closed += open_.filter(
            subject_type=subject_type,
            subject_id__in=settled.values("pk"),
            kind__in=[
                CaseKind.UNRESOLVED,
                CaseKind.UNKNOWN_NOTIFICATION,
                CaseKind.UNKNOWN_LINE,
                CaseKind.DISCREPANCY,
            ],
        ).update(state=CaseState.RESOLVED, resolved_at=now, resolution="settled by the machine")
    return closed
