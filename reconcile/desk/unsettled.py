"""Each job's items still to settle, read off the books, and the sweep that clears the
failed items settled since by any path (see ``isolation.py``, the failure isolation that
counts them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Q, QuerySet

from callbacks.models import ProviderNotification
from idempotency.models import IdempotencyKey, RecoveryPoint
from operations.statements.models import (
    LineOutcome,
    StatementDiscrepancy,
    StatementImport,
    StatementLine,
)
from payments.models import (
    UNSETTLED_REFUND_STATUSES,
    UNSETTLED_STATUSES,
    Dispute,
    DisputeStatus,
    Payment,
    Refund,
    RefundAttemptStatus,
)
from reconcile.desk.isolation import (
    CASES_DISCREPANCIES,
    CASES_NOTIFICATIONS,
    CASES_PAYMENTS,
    CASES_REFUNDS,
    COMPLETION,
    DISPUTES,
    JOBS_BY_SUBJECT,
    NOTIFICATIONS,
    ORPHAN_REFUNDS,
    PAYMENTS,
    REAP,
    REFUNDS,
    STATEMENT_DOWNLOADS,
    STATEMENT_LINES,
    STATEMENTS,
    STRAY_NOTIFICATIONS,
    STRAY_REFUNDS,
    failure_clear,
)
from reconcile.desk.models import Case, CaseKind, CaseState, ItemFailure
from reconcile.models import StrayCapture
from reconcile.selectors import payments_orphaned_without_refund


def _notifications_unsettled() -> QuerySet[Any, Any]:
    return ProviderNotification.objects.filter(resolved_at__isnull=True)


def _without_case(rows: QuerySet[Any, Any], subject_type: str) -> QuerySet[Any, Any]:
    # The open-cases job's item is settled once its subject has its case (or none is
    # needed any more: the subject settled, so it is not among ``rows``).
    return rows.exclude(
        pk__in=Case.objects.filter(subject_type=subject_type)
        .exclude(kind=CaseKind.ITEM_FAILED)
        .values("subject_id")
    )


# Each job's items still to settle, read off the books: a failed item not among them
# settled since, by whichever path. (A job not listed keeps its count and case until
# it runs the item again.)
UNSETTLED: dict[str, Callable[[], QuerySet[Any, Any]]] = {
    PAYMENTS: lambda: Payment.objects.filter(status__in=UNSETTLED_STATUSES),
    ORPHAN_REFUNDS: lambda: Payment.objects.filter(pk__in=payments_orphaned_without_refund()),
    REFUNDS: lambda: Refund.objects.filter(status__in=UNSETTLED_REFUND_STATUSES),
    NOTIFICATIONS: _notifications_unsettled,
    STRAY_NOTIFICATIONS: _notifications_unsettled,
    STATEMENT_LINES: lambda: StatementLine.objects.filter(outcome=LineOutcome.PENDING),
    STATEMENTS: lambda: StatementImport.objects.filter(
        pk__in=StatementLine.objects.filter(outcome=LineOutcome.PENDING).values("statement_id")
    ),
    STATEMENT_DOWNLOADS: lambda: StatementImport.objects.filter(~Q(error="") | Q(downloads=0)),
    DISPUTES: lambda: Dispute.objects.filter(status=DisputeStatus.OPEN),
    STRAY_REFUNDS: lambda: StrayCapture.objects.exclude(
        refund_status=RefundAttemptStatus.SUCCEEDED
    ),
    COMPLETION: lambda: IdempotencyKey.objects.exclude(recovery_point=RecoveryPoint.FINISHED),
    REAP: lambda: IdempotencyKey.objects.all(),  # a reaped record is gone, by any path
    CASES_PAYMENTS: lambda: _without_case(
        Payment.objects.filter(status__in=UNSETTLED_STATUSES), "payment"
    ),
    CASES_REFUNDS: lambda: _without_case(
        Refund.objects.filter(status__in=UNSETTLED_REFUND_STATUSES), "refund"
    ),
    CASES_NOTIFICATIONS: lambda: _without_case(_notifications_unsettled(), "notification"),
    CASES_DISCREPANCIES: lambda: _without_case(
        StatementDiscrepancy.objects.filter(resolved_at__isnull=True), "discrepancy"
    ),
}


def failures_settled() -> int:
    """Clear the count, and close the case, of every failed item settled since by any
    path (see the module doc); how many cases it closed."""
    closed = 0
    subject_of = {job: subject for subject, jobs in JOBS_BY_SUBJECT.items() for job in jobs}
    for job, unsettled in UNSETTLED.items():
        failing = {
            key: reference
            for key, reference in ItemFailure.objects.filter(job=job).values_list(
                "key", "reference"
            )
        }
        failing |= {
            str(subject_id): reference
            for subject_id, reference in Case.objects.filter(
                kind=CaseKind.ITEM_FAILED, job=job, state=CaseState.OPEN
            ).values_list("subject_id", "reference")
        }
        if not failing:
            continue
        still = {
            str(pk)
            for pk in unsettled()
            .filter(pk__in=[int(key) for key in failing])
            .values_list("pk", flat=True)
        }
        for key in failing.keys() - still:
            closed += failure_clear(
                job=job, subject_type=subject_of[job], key=key, reference=failing[key]
            )
    return closed
