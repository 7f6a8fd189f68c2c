"""Beat's statement jobs (thin: each runs one job under its single-runner lock).

Each returns the job's counts, or None when another runner had the lock.
"""

from typing import Any

from celery import shared_task

from operations.statements.passes import RECONCILE_STATEMENT, STATEMENT_LEFTOVERS
from reconcile.passes import job_run


@shared_task
def reconcile_statement() -> dict[str, Any] | None:
    # The lock only saves a second instance the download: the import's unique
    # constraints, not the lock, make a concurrent or repeated run change nothing.
    return job_run(RECONCILE_STATEMENT)


@shared_task
def reconcile_statement_leftovers() -> dict[str, Any] | None:
    return job_run(STATEMENT_LEFTOVERS)
