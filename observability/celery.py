"""The request id across the queue, task metrics and logs, and a worker's metrics port.

- ``before_task_publish`` (the publishing process): the current request id goes
  into the message headers, so a task enqueued by a pay request (fulfilment, a
  provider notification) logs with that request's id;
- ``task_prerun`` / ``task_postrun`` (the process that runs the task): a log
  context per task, a "task started" line, and the task metrics;
- ``setup_logging``: Celery uses ``settings.LOGGING`` instead of its own format;
- ``worker_init`` / ``worker_process_shutdown``: the worker's multiprocess
  directory is emptied at start, dead pool processes are marked, and with
  ``CELERY_METRICS_PORT`` set the worker serves its counters on that port.

Connected from ``config/celery.py``, so every process that has the app has them.
"""

from __future__ import annotations

import logging
import logging.config
import os
import time
from typing import Any

from celery import signals

from observability import context

logger = logging.getLogger("onceshop.tasks")

# The message header that carries the request id (protocol 2 custom header).
HEADER = "onceshop_request_id"

_started: dict[str, tuple[float, Any]] = {}  # task id -> (start, context token)


@signals.setup_logging.connect
def _setup_logging(loglevel: int | str | None = None, **_: Any) -> None:
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    if loglevel:  # `celery worker --loglevel` still decides, as Celery users expect
        logging.getLogger().setLevel(loglevel)


@signals.before_task_publish.connect
def _carry_request_id(headers: dict[str, Any] | None = None, **_: Any) -> None:
    request_id = context.request_id()
    if headers is not None and request_id and HEADER not in headers:
        headers[HEADER] = request_id


@signals.task_prerun.connect
def _task_started(task_id: str, task: Any, **_: Any) -> None:
    request_id = getattr(task.request, HEADER, None)
    token = context.start(request_id=request_id, task=task.name, task_id=task_id)
    _started[task_id] = (time.perf_counter(), token)
    retries = task.request.retries or 0
    logger.info("task %s started%s", task.name, f" (retry {retries})" if retries else "")


@signals.task_postrun.connect
def _task_finished(task_id: str, task: Any, state: str | None = None, **_: Any) -> None:
    from observability.metrics import instruments

    started, token = _started.pop(task_id, (None, None))
    instruments.CELERY_TASKS.labels(task=task.name, state=state or "UNKNOWN").inc()
    if started is not None:
        instruments.CELERY_DURATION.labels(task=task.name).observe(time.perf_counter() - started)
    if token is not None:
        context.reset(token)


@signals.worker_init.connect
def _worker_init(**_: Any) -> None:
    from django.conf import settings

    from observability.metrics import multiproc

    multiproc.reset_directory()
    if settings.CELERY_METRICS_PORT:
        from observability.metrics.exposition import serve_worker_metrics

        serve_worker_metrics(bind=settings.CELERY_METRICS_BIND, port=settings.CELERY_METRICS_PORT)


@signals.worker_process_shutdown.connect
def _pool_process_exit(**_: Any) -> None:
    from observability.metrics import multiproc

    multiproc.mark_dead(os.getpid())
