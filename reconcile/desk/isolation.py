"""One bad item never stops a pass: failure isolation, which every batch job runs its items in.

    isolation = FailureIsolation(job=NOTIFICATIONS, subject_type="notification")
    for notification in batch:
        if not isolation.due(notification.pk):
            continue                         # failed lately: backing off
        result = isolation.run(
            key=notification.pk,
            reference=notification.notify_id,
            work=lambda: notification_resolve(notification=notification, provider=provider),
            failed=None,                     # what the job counts for a failed item
        )

An item's writes commit or roll back in its own transactions (the services'
``atomic`` blocks), never together with another item's: the isolation opens no
transaction around the work, because an item may call the provider, and no row
lock is held while the provider is asked. When the work raises, the isolation

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
(``failures_settled`` in ``unsettled.py``, from ``cases_run_once``), which reads
each job's items still to settle off the books themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from reconcile.desk.models import CaseKind, ItemFailure
from reconcile.desk.services import case_close_by_machine, case_open
from reconcile.recovery.claims import reconcile_backoff_s

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The jobs whose items failure isolation counts (``ItemFailure.job``), and the subject each
# item is (a key of the audit's finding ids, so the audit sees the case holding it).
PAYMENTS = "payments"
ORPHAN_REFUNDS = "orphan-refunds"
REFUNDS = "refunds"
NOTIFICATIONS = "notifications"
STATEMENTS = "statements"
STATEMENT_LINES = "statement-lines"
STRAY_REFUNDS = "stray-refunds"
STRAY_NOTIFICATIONS = "stray-notifications"
STATEMENT_DOWNLOADS = "statement-downloads"
DISPUTES = "disputes"
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
    "statement": [STATEMENTS, STATEMENT_DOWNLOADS],
    "stray": [STRAY_REFUNDS],
    "dispute": [DISPUTES],
    # An UNPAID order is expiry's, a PAID one fulfilment's: never both jobs' at once.
    "order": [EXPIRY, FULFILMENT],
    "record": [COMPLETION, REAP],  # an idempotency record
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


class FailureIsolation:
    """Isolates the failure of one item of a batch job's pass, so the pass goes on, and
    records it (see the module doc)."""

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
            # isolation never raises: the rest of the batch goes on.
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
        failure_clear(job=self.job, subject_type=self.subject_type, key=key, reference=reference)


def failure_clear(*, job: str, subject_type: str, key: str, reference: str) -> int:
    """The job's count of the item removed and its case closed: how many cases closed."""
    ItemFailure.objects.filter(job=job, key=key).delete()
    return case_close_by_machine(
        kind=CaseKind.ITEM_FAILED,
        subject_type=subject_type,
        subject_id=int(key),
        job=job,
        resolution=f"{job}: {reference} settled by the machine after failing",
    )
