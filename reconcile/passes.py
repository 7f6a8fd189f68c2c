"""Run the periodic jobs, each under its single-runner lock.

A job is one ``run_once()``; a pass is all of them in a sensible order:

1. reconcile payments: settle what is unknown, finish the requests behind them;
2. reconcile notifications the shop could not apply (late successes, other
   amounts): roll forward, or book orphaned captures and start their refunds;
3. reconcile refunds: settle unknown ones, send orphan refunds (after 1 and 2
   started some);
4. complete abandoned requests whose attempt was settled some other way;
5. expire unpaid orders (after 1, an attempt that was failed frees its order);
6. reap idempotency records past their retention window;
7. fulfil: ship PAID orders that have no shipment (after 1 and 2 rolled some forward);
8. open the desk's cases that are due (after everything the machine could settle),
   and close those the machine settled meanwhile.

Beat runs each job as its own task at its own pace (config/settings/background.py);
``manage.py reconcile --once`` runs the whole pass, with the statement's jobs in
it (operations/statements/passes.py: the core never imports the operations).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from idempotency.services import idempotency_key_reap
from observability.tracking import reconcile_job
from reconcile.desk.services import cases_run_once
from reconcile.locks import single_runner
from reconcile.recovery import (
    completion,
    expiry,
    fulfilment,
    notifications,
    unsettled_payments,
    unsettled_refunds,
)


@dataclass(frozen=True)
class Job:
    """A periodic job: its lock name and its ``run_once``."""

    name: str
    run_once: Callable[[], Any]


RECONCILE_PAYMENTS = Job("reconcile-payments", unsettled_payments.run_once)
RECONCILE_NOTIFICATIONS = Job("reconcile-notifications", notifications.run_once)
RECONCILE_REFUNDS = Job("reconcile-refunds", unsettled_refunds.run_once)
COMPLETE_REQUESTS = Job("complete-requests", completion.run_once)
EXPIRE_ORDERS = Job("expire-orders", expiry.run_once)
REAP_KEYS = Job("reap-keys", idempotency_key_reap)
FULFIL_ORDERS = Job("fulfil-orders", fulfilment.run_once)
OPEN_CASES = Job("open-cases", cases_run_once)

# The order of a pass (see the module docstring for why).
JOBS = [
    RECONCILE_PAYMENTS,
    RECONCILE_NOTIFICATIONS,
    RECONCILE_REFUNDS,
    COMPLETE_REQUESTS,
    EXPIRE_ORDERS,
    REAP_KEYS,
    FULFIL_ORDERS,
    OPEN_CASES,
]


@reconcile_job
def job_run(job: Job) -> dict[str, Any] | None:
    """Run ``job`` if no other runner is running it; its counts, or None if skipped."""
    with single_runner(name=job.name) as mine:
        if not mine:
            return None
        return dataclasses.asdict(job.run_once())


def pass_run_once() -> dict[str, dict[str, Any] | None]:
    """One pass of every job, in order: job name -> its counts (None: another runner had it)."""
    return {job.name: job_run(job) for job in JOBS}
