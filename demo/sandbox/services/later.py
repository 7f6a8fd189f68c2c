"""What a fault scheduled for later: a Celery task enqueued once its transaction commits."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from config.celery import whole_seconds


def task_at_commit(task_name: str, pk: int, at: datetime) -> None:
    """Enqueue the sandbox task ``task_name(pk)`` to run at ``at``, once the transaction
    commits. Robust: a lost enqueue (the broker down at that instant) leaves the row's
    marker set, and the sweep (services.sweeps) does it later."""

    def enqueue_scheduled_task() -> None:  # named: Django logs a robust hook's failure by name
        # Imported here: the tasks are registered only where the sandbox is served.
        from demo.sandbox import tasks

        countdown = max(0.0, (at - timezone.now()).total_seconds())
        getattr(tasks, task_name).apply_async(args=(pk,), countdown=whole_seconds(countdown))

    transaction.on_commit(enqueue_scheduled_task, robust=True)
