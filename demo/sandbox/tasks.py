"""Background work of the sandbox provider (thin: each task calls one service)."""

from typing import Any

from celery import Task, shared_task

from config.celery import whole_seconds
from demo.sandbox.delivery import MAX_RETRIES, notification_deliver


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def deliver_notification(self: Task[Any, Any], notification_id: int) -> str:
    """POST one notification copy; retry with backoff until a 2xx or MAX_RETRIES.

    The attempt count lives on the row, not in the message, so the service decides
    when to stop; Celery's ``max_retries`` is the same number, as a backstop.
    """
    result = notification_deliver(notification_id=notification_id)
    if result.retry_in is not None:
        raise self.retry(countdown=whole_seconds(result.retry_in))
    return result.status


@shared_task(acks_late=True)
def settle_late_success(charge_id: int) -> str:
    """A charge declined under ``late_success`` succeeds now (safe to run twice)."""
    # Imported here: the service enqueues this task, so it imports this module.
    from demo.sandbox.services.late_success import late_success_settle

    charge = late_success_settle(charge_id=charge_id)
    return "already settled" if charge is None else charge.status


@shared_task(acks_late=True)
def settle_refund_late_success(refund_id: int) -> str:
    """A refund declined under ``late_success`` succeeds now (safe to run twice)."""
    from demo.sandbox.services.late_success import refund_late_success_settle

    refund = refund_late_success_settle(refund_id=refund_id)
    return "already settled" if refund is None else refund.status


@shared_task(acks_late=True)
def reverse_refund(refund_id: int) -> str:
    """A refund under ``refund_reversal`` fails now (safe to run twice)."""
    from demo.sandbox.services.reversals import refund_reversal_settle

    refund = refund_reversal_settle(refund_id=refund_id)
    return "already settled" if refund is None else refund.status


@shared_task(acks_late=True)
def open_dispute(charge_id: int) -> str:
    """A charge under ``dispute_lost`` is disputed now (safe to run twice)."""
    from demo.sandbox.services.disputes import dispute_open

    dispute = dispute_open(charge_id=charge_id)
    return "already opened" if dispute is None else dispute.status


@shared_task(acks_late=True)
def close_dispute(dispute_id: int) -> str:
    """An open dispute is closed, lost (safe to run twice)."""
    from demo.sandbox.services.disputes import dispute_close_lost

    dispute = dispute_close_lost(dispute_id=dispute_id)
    return "already closed" if dispute is None else dispute.status


@shared_task(acks_late=True)
def sweep_lost_messages() -> dict[str, int]:
    """Beat's safety net: what a lost enqueue left undone (demo/sandbox/services/sweeps.py)."""
    from dataclasses import asdict

    from demo.sandbox.services.sweeps import sandbox_sweep_run_once

    return asdict(sandbox_sweep_run_once())
