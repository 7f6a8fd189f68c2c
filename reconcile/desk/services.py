"""Opening cases and closing what the machine settled: the desk's own writes.

Opening is idempotent: ``INSERT ... ON CONFLICT DO NOTHING`` against the
partial unique index of open cases per subject, so every pass may find the
same matter again and still one case is open for it. A person's actions on a
case are in ``actions.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection, models
from django.db.models import Q, QuerySet
from django.utils import timezone

from callbacks.models import ProviderNotification
from operations.statements.models import StatementDiscrepancy
from payments.models import UNSETTLED_REFUND_STATUSES, UNSETTLED_STATUSES, Payment, Refund
from reconcile.desk.models import Case, CaseKind, CaseState

logger = logging.getLogger(__name__)

_OPEN = """
    INSERT INTO reconcile_case
        (kind, subject_type, subject_id, job, reference, summary, state, opened_at, resolution)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, '')
    ON CONFLICT DO NOTHING
    RETURNING id
"""


def case_open(
    *, kind: str, subject_type: str, subject_id: int, reference: str, summary: str, job: str = ""
) -> int | None:
    """Open a case about the subject unless one is open already (for the same job, if an
    item of a job failed); its id if this opened it."""
    with connection.cursor() as cursor:
        cursor.execute(
            _OPEN,
            [
                kind,
                subject_type,
                subject_id,
                job,
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


def case_close_by_machine(
    *, kind: str, subject_type: str, subject_id: int, resolution: str, job: str = ""
) -> int:
    """Close the subject's open case of ``kind`` (and ``job``): the machine settled it."""
    return Case.objects.filter(
        kind=kind, subject_type=subject_type, subject_id=subject_id, job=job, state=CaseState.OPEN
    ).update(state=CaseState.RESOLVED, resolved_at=timezone.now(), resolution=resolution)


# --- The beat job: open what time or the machine's findings make a case --------------


@dataclass(frozen=True)
class CaseCounts:
    opened: int = 0
    closed: int = 0  # cases whose subject the machine settled meanwhile


def cases_run_once() -> CaseCounts:
    """Open the cases that are due, and close those whose subject is settled: by any
    path (a callback, the statement, a person), not only by the job that failed on it."""
    from reconcile.desk.unsettled import failures_settled
    from reconcile.recovery.disputes import dispute_cases_run_once
    from reconcile.recovery.reversals import reversal_cases_run_once

    opened, closed = _open_due(), _close_settled() + failures_settled()
    # Money that moved after the fact: reversed refunds, open disputes (each its room's).
    reversals, disputes = reversal_cases_run_once(), dispute_cases_run_once()
    return CaseCounts(
        opened=opened + reversals.opened + disputes.opened,
        closed=closed + reversals.closed + disputes.closed,
    )


def _open_due() -> int:
    # Each subject's case is opened through failure isolation (one job per kind of subject,
    # as a job's keys are one table's ids): one whose case cannot be written (a
    # refused row, data that makes the summary raise) is counted and backs off, and
    # every other subject still gets its case.
    from reconcile.desk.isolation import (
        CASES_DISCREPANCIES,
        CASES_NOTIFICATIONS,
        CASES_PAYMENTS,
        CASES_REFUNDS,
    )

    now = timezone.now()
    started_before = now - timedelta(seconds=settings.CASE_AFTER_S)
    due_before = now - timedelta(seconds=settings.RECONCILE_AFTER_S)
    payments = Payment.objects.filter(
        status__in=UNSETTLED_STATUSES, created_at__lt=started_before
    ).exclude(pk__in=_held_or_dismissed_lately("payment"))
    refunds = Refund.objects.filter(
        status__in=UNSETTLED_REFUND_STATUSES, created_at__lt=started_before
    ).exclude(pk__in=_held_or_dismissed_lately("refund"))
    # Charge successes are the statement job's first (it asks the provider, and opens
    # the case itself when the provider does not confirm); everything else unmatched
    # (a closed charge, a refund of a reference never ours) has nothing the machine
    # can do, and is a case once the reconciler had its time.
    notifications = (
        ProviderNotification.objects.filter(
            outcome=ProviderNotification.Outcome.UNMATCHED,
            resolved_at__isnull=True,
            received_at__lt=due_before,
        )
        .exclude(event=ProviderNotification.Event.CHARGE, trade_status="SUCCESS")
        .exclude(pk__in=_held("notification"))
    )
    discrepancies = (
        StatementDiscrepancy.objects.filter(resolved_at__isnull=True)
        .exclude(pk__in=_held("discrepancy"))
        .select_related("line")
    )
    return (
        _open_each(CASES_PAYMENTS, "payment", payments, _payment_case_open, _out_trade_no)
        + _open_each(CASES_REFUNDS, "refund", refunds, _refund_case_open, _refund_no)
        + _open_each(
            CASES_NOTIFICATIONS, "notification", notifications, _notification_case, _notify_id
        )
        + _open_each(
            CASES_DISCREPANCIES, "discrepancy", discrepancies, _discrepancy_case_open, _line_ref
        )
    )


M = TypeVar("M", bound=models.Model)


def _open_each(
    job: str,
    subject_type: str,
    rows: QuerySet[M, M],
    open_one: Callable[[M], int | None],
    reference_of: Callable[[M], str],
) -> int:
    """Open each row's case in the job's failure isolation; how many it opened."""
    from reconcile.desk.isolation import FailureIsolation

    isolation = FailureIsolation(job=job, subject_type=subject_type)
    opened = 0
    for row in rows:
        if not isolation.due(row.pk):
            continue  # failed lately: backing off
        case_id = isolation.run(
            key=row.pk, reference=reference_of(row), work=partial(open_one, row), failed=None
        )
        opened += case_id is not None
    return opened


def _notification_case(notification: ProviderNotification) -> int | None:
    return notification_case_open(notification=notification)


def _out_trade_no(payment: Payment) -> str:
    return payment.out_trade_no


def _refund_no(refund: Refund) -> str:
    return refund.refund_no


def _notify_id(notification: ProviderNotification) -> str:
    return notification.notify_id


def _line_ref(discrepancy: StatementDiscrepancy) -> str:
    return discrepancy.line.reference if discrepancy.line else f"discrepancy {discrepancy.pk}"


def _payment_case_open(payment: Payment) -> int | None:
    return case_open(
        kind=CaseKind.UNRESOLVED,
        subject_type="payment",
        subject_id=payment.pk,
        reference=payment.out_trade_no,
        summary=f"payment {payment.out_trade_no} of {payment.amount} {payment.currency} "
        f"still {payment.status} since {payment.created_at:%Y-%m-%d %H:%M} UTC, "
        f"after {payment.reconcile_attempts} tries",
    )


def _refund_case_open(refund: Refund) -> int | None:
    return case_open(
        kind=CaseKind.UNRESOLVED,
        subject_type="refund",
        subject_id=refund.pk,
        reference=refund.refund_no,
        summary=f"refund {refund.refund_no} of {refund.amount} {refund.currency} "
        f"still {refund.status} since {refund.created_at:%Y-%m-%d %H:%M} UTC",
    )


def _discrepancy_case_open(d: StatementDiscrepancy) -> int | None:
    unknown = (
        d.line is not None
        and d.kind in ("unknown-refund", "not-booked")
        and not (
            Payment.objects.filter(out_trade_no=d.line.reference).exists()
            or Refund.objects.filter(refund_no=d.line.reference).exists()
        )
    )
    return case_open(
        kind=CaseKind.UNKNOWN_LINE if unknown else CaseKind.DISCREPANCY,
        subject_type="discrepancy",
        subject_id=d.pk,
        reference=d.line.reference if d.line else "",
        summary=f"statement {d.day}: {d.kind}: {d.reason}",
    )


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


def _held_or_dismissed_lately(subject_type: str) -> QuerySet[Case, Any]:
    # An unresolved attempt has one case open at a time. One a person dismissed is not
    # opened again at once (the person has just looked), but CASE_AFTER_S later, if the
    # attempt is still unresolved then, as a new case: a dismiss never hides a problem
    # for ever, and the dismissed case stays as it was, with its reason.
    dismissed_lately = timezone.now() - timedelta(seconds=settings.CASE_AFTER_S)
    return (
        Case.objects.filter(subject_type=subject_type, kind=CaseKind.UNRESOLVED)
        .filter(Q(state=CaseState.OPEN) | Q(resolved_at__gte=dismissed_lately))
        .values("subject_id")
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
