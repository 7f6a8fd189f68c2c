"""The statement's periodic jobs, and the pass ``manage.py reconcile --once`` runs.

The core's pass (reconcile/passes.py) knows nothing of the statement; the pass
here is the core's, in its order, with what a statement left for later (lines
whose attempt was in flight, refunds of stray captures, unmatched notifications
of captures) right after the core reconciled refunds: after the refunds the
core started, before the completer finishes the requests behind them. The
daily import is not part of a pass: beat runs it once a day, and
``manage.py reconcile_statement`` any day.
"""

from __future__ import annotations

from typing import Any

from operations.statements import jobs
from reconcile.passes import JOBS as CORE_PASS
from reconcile.passes import RECONCILE_REFUNDS, Job, job_run

RECONCILE_STATEMENT = Job("reconcile-statement", jobs.daily_run_once)
STATEMENT_LEFTOVERS = Job("statement-leftovers", jobs.leftovers_run_once)

_AFTER_REFUNDS = CORE_PASS.index(RECONCILE_REFUNDS) + 1
# The order of a pass (see the module docstring for why the leftovers go here).
JOBS = [*CORE_PASS[:_AFTER_REFUNDS], STATEMENT_LEFTOVERS, *CORE_PASS[_AFTER_REFUNDS:]]


def pass_run_once() -> dict[str, dict[str, Any] | None]:
    """One pass of every job, in order: job name -> its counts (None: another runner had it)."""
    return {job.name: job_run(job) for job in JOBS}
