"""The demo's own task (demo/shop/redelivery.py): thin, safe to run twice."""

import time

from celery import shared_task

from demo.shop.redelivery import (
    DEMO_TASK_S,
    redelivery_attempt_finish,
    redelivery_attempt_start,
)


@shared_task
def demo_redelivery(run_id: str) -> None:
    """Record an attempt, work for DEMO_TASK_S (a stand-in for real work), record the end."""
    index = redelivery_attempt_start(run_id=run_id)
    time.sleep(DEMO_TASK_S)
    redelivery_attempt_finish(run_id=run_id, index=index)
