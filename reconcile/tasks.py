"""Beat's periodic jobs (thin: each runs one service under its single-runner lock).

Safe to run twice or side by side (acks_late redelivery, two beats): the lock
turns a second runner away, and the row claims make an overlap harmless anyway.
Each returns the job's counts, or None when another runner had the lock.
The reaper's task is ``idempotency.tasks.reap_idempotency_keys``.
"""

from typing import Any

from celery import shared_task

from reconcile.passes import (
    COMPLETE_REQUESTS,
    EXPIRE_ORDERS,
    FULFIL_ORDERS,
    OPEN_CASES,
    RECONCILE_NOTIFICATIONS,
    RECONCILE_PAYMENTS,
    RECONCILE_REFUNDS,
    job_run,
)


@shared_task
def reconcile_payments() -> dict[str, Any] | None:
    return job_run(RECONCILE_PAYMENTS)


@shared_task
def reconcile_notifications() -> dict[str, Any] | None:
    return job_run(RECONCILE_NOTIFICATIONS)


@shared_task
def reconcile_refunds() -> dict[str, Any] | None:
    return job_run(RECONCILE_REFUNDS)


@shared_task
def complete_abandoned_requests() -> dict[str, Any] | None:
    return job_run(COMPLETE_REQUESTS)


@shared_task
def expire_unpaid_orders() -> dict[str, Any] | None:
    return job_run(EXPIRE_ORDERS)


@shared_task
def fulfil_paid_orders() -> dict[str, Any] | None:
    return job_run(FULFIL_ORDERS)


@shared_task
def open_cases() -> dict[str, Any] | None:
    return job_run(OPEN_CASES)
