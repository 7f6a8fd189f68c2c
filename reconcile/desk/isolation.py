"""One bad item never stops a pass: the guard every batch job runs its items through.

    guard = ItemGuard(job=NOTIFICATIONS, subject_type="notification")
    for notification in batch:
        if not guard.due(notification.pk):
            continue                         # failed lately: backing off
        result = guard.run(
            key=notification.pk,
            reference=notification.notify_id,
            work=lambda: notification_resolve(notification=notification, provider=provider),
            failed=None,                     # what the job counts for a failed item
        )

An item's writes commit or roll back in its own transactions (the services'
``atomic`` blocks), never together with another item's: the guard opens no
transaction around the work, because an item may call the provider, and no row
lock is held while the provider is asked. When the work raises, the guard

- logs the error with the item's reference,
- counts it in ``ItemFailure`` (committed on its own, so the count stays however
  the item's transaction ended), due again after the reconciler's backoff
  (``reconcile_backoff_s``; a job whose rows carry their own backoff passes
  ``on_failure`` as well, e.g. the claim's ``retry_later``),
- opens a case after CASE_AFTER_FAILURES failures in a row,

and returns ``failed``: the batch goes on. A failed item's count and case
belong to its job (``ItemFailure.job``, ``Case.job``): two jobs failing on one
subject (the payments and the orphan-refunds job on a payment) count and hold
it apart, and one clearing its item leaves the other's case open.

An item that settles after failing has its count cleared and its case closed:
by its own job the next time that job runs it (``settled``), or, whatever path
settled it (a callback settling the payment, the statement matching the line,
a person refunding an orphan another way), by the open-cases job
(``failures_settled``, from ``cases_run_once``), which reads each job's items
still to settle off the books themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import QuerySet
from django.utils import timezone

from callbacks.models import ProviderNotification
from idempotency.models import IdempotencyKey, RecoveryPoint
from payments.models import (
    UNSETTLED_REFUND_STATUSES,
    UNSETTLED_STATUSES,
    Payment,
    Refund,
    RefundAttemptStatus,
)
from reconcile.desk.models import Case, CaseKind, CaseState, ItemFailure
from reconcile.desk.services import case_close_by_machine, case_open
from reconcile.models import (
    LineOutcome,
    StatementDiscrepancy,
    StatementImport,
    StatementLine,
    StrayCapture,
)
from reconcile.recovery.claims import reconcile_backoff_s
from reconcile.selectors import payments_orphaned_without_refund

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The jobs whose items the guard counts (``ItemFailure.job``), and the subject each
# item is (a key of the audit's finding ids, so the audit sees the case holding it).
PAYMENTS = "payments"
ORPHAN_REFUNDS = "orphan-refunds"
REFUNDS = "refunds"
NOTIFICATIONS = "notifications"
STATEMENTS = "statements"
STATEMENT_LINES = "statement-lines"
STRAY_REFUNDS = "stray-refunds"
STRAY_NOTIFICATIONS = "stray-notifications"
EXPIRY = "expiry"
FULFILMENT = "fulfilment"
COMPLETION = "completion"
REAP = "reap-keys"
# The open-cases job: one job per kind of subject it opens cases about.
CASES_PAYMENTS = "cases-payments"
CASES_REFUNDS = "cases-refunds"
CASES_NOTIFICATIONS = "cases-notifications"
CASES_DISCREPANCIES = "cases-discrepancies"

JOBS_BY_SUBJECT = {
    "payment": [PAYMENTS, ORPHAN_REFUNDS, CASES_PAYMENTS],
    "refund": [REFUNDS, CASES_REFUNDS],
    "notification": [NOTIFICATIONS, STRAY_NOTIFICATIONS, CASES_NOTIFICATIONS],
    "discrepancy": [CASES_DISCREPANCIES],
    "line": [STATEMENT_LINES],
    "statement": [STATEMENTS],
    "stray": [STRAY_REFUNDS],
    # An UNPAID order is expiry's, a PAID one fulfilment's: never both jobs' at once.
    "order": [EXPIRY, FULFILMENT],
    "record": [COMPLETION, REAP],  # an idempotency record
}


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

# The longest error text kept per item: the traceback is in the log line.
_MAX_ERROR = 2000

_FAILED = """
    INSERT INTO reconcile_itemfailure
        (job, key, reference, failures, last_error, first_failed_at, last_failed_at, next_try_at)
    VALUES (%(job)s, %(key)s, %(reference)s, 1, %(error)s, %(now)s, %(now)s, %(now)s)
    ON CONFLICT (job, key) DO UPDATE
        SET failures = reconcile_itemfailure.failures + 1, last_error = EXCLUDED.last_error,
            reference = EXCLUDED.reference, last_failed_at = EXCLUDED.last_failed_at
    RETURNING failures
"""


class ItemGuard:
    """A batch job's guard for one pass (see the module doc)."""

    def __init__(self, *, job: str, subject_type: str) -> None:
        self.job = job
        self.subject_type = subject_type
        self.failed = 0  # items of this pass that raised
        self._failing: dict[str, datetime] | None = None

    def _known(self) -> dict[str, datetime]:
        # One read per pass, the first time it is needed: the items of this job that
        # failed lately, and when each is due again (few, unless something is badly off).
        if self._failing is None:
            self._failing = dict(
                ItemFailure.objects.filter(job=self.job).values_list("key", "next_try_at")
            )
        return self._failing

    def due(self, key: object) -> bool:
        """False while the item backs off from its last failure."""
        next_try = self._known().get(str(key))
        return next_try is None or next_try <= timezone.now()

    def run(
        self,
        *,
        key: object,
        reference: str,
        work: Callable[[], T],
        failed: T,
        on_failure: Callable[[], object] | None = None,
    ) -> T:
        """``work()``, or ``failed`` if it raised (counted, logged, backed off)."""
        try:
            result = work()
        except Exception as error:
            self.failed += 1
            self._record(key=str(key), reference=reference, error=error)
            if on_failure is not None:
                on_failure()
            return failed
        self.settled(key=key, reference=reference)
        return result

    def settled(self, *, key: object, reference: str) -> None:
        """The item settled (here or by a job's fast path): its count and case are cleared."""
        if str(key) in self._known():
            self._cleared(key=str(key), reference=reference)

    def _record(self, *, key: str, reference: str, error: Exception) -> None:
        now = timezone.now()
        text = f"{type(error).__name__}: {error}"[:_MAX_ERROR]
        try:
            # Autocommit, outside any transaction of the item's (those rolled back
            # with the error): the count is there for the next pass whatever happened.
            with connection.cursor() as cursor:
                cursor.execute(
                    _FAILED,
                    {
                        "job": self.job,
                        "key": key,
                        "reference": reference[:64],  # a client's key may be longer
                        "error": text,
                        "now": now,
                    },
                )
                failures = cursor.fetchone()[0]
            next_try = now + timedelta(seconds=reconcile_backoff_s(failures))
            ItemFailure.objects.filter(job=self.job, key=key).update(next_try_at=next_try)
        except DatabaseError:
            logger.exception(
                "%s %s (%s): failed, and its failure not counted", self.job, key, reference
            )
            return
        self._known()[key] = next_try
        if failures < settings.CASE_AFTER_FAILURES:
            logger.error(
                "%s %s (%s): failed (%d of %d before a case)",
                self.job,
                key,
                reference,
                failures,
                settings.CASE_AFTER_FAILURES,
                exc_info=error,
            )
            return
        try:
            opened = case_open(
                kind=CaseKind.ITEM_FAILED,
                subject_type=self.subject_type,
                subject_id=int(key),
                reference=reference,
                summary=f"{self.job}: {reference} failed {failures} times in a row; last: {text}",
                job=self.job,
            )
        except DatabaseError:
            # The failure is counted; its case is tried again at the next failure. The
            # guard never raises: the rest of the batch goes on.
            logger.exception(
                "%s %s (%s): failed %d times, and its case not opened",
                self.job,
                key,
                reference,
                failures,
            )
            return
        # Once a person holds it, each further failure is a warning: the case and its
        # alert speak for it, not an ERROR line at every backoff.
        (logger.error if opened else logger.warning)(
            "%s %s (%s): failed %d times%s",
            self.job,
            key,
            reference,
            failures,
            f"; case {opened} opened" if opened else "; its case is open",
            exc_info=error if opened else None,
        )

    def _cleared(self, *, key: str, reference: str) -> None:
        self._known().pop(key, None)
        _clear(job=self.job, subject_type=self.subject_type, key=key, reference=reference)


def _clear(*, job: str, subject_type: str, key: str, reference: str) -> int:
    """The job's count of the item removed and its case closed: how many cases closed."""
    ItemFailure.objects.filter(job=job, key=key).delete()
    return case_close_by_machine(
        kind=CaseKind.ITEM_FAILED,
        subject_type=subject_type,
        subject_id=int(key),
        job=job,
        resolution=f"{job}: {reference} settled by the machine after failing",
    )


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
            closed += _clear(job=job, subject_type=subject_of[job], key=key, reference=failing[key])
    return closed
