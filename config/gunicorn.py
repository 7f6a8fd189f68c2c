"""gunicorn's settings file (``gunicorn -c python:config.gunicorn``): limits, metrics hooks, logs.

With ``PROMETHEUS_MULTIPROC_DIR`` set, every worker writes its counters to that
directory and ``/metrics`` sums them (observability/metrics/multiproc.py). The
master empties it before the first worker starts, and drops a dead worker's
live gauges when it exits. Without the variable both hooks do nothing.

gunicorn's own lines (booting, worker timeouts) use the app's format: LOG_FORMAT.

Its limits on a request's head are above the shop's own (edge/http_limits.py),
so a URL or a header field that is too long is answered by the shop, as
problem+json, not by gunicorn's HTML page.
"""

import os
from typing import Any

from edge.http_limits import (
    GUNICORN_LIMIT_REQUEST_FIELD_SIZE,
    GUNICORN_LIMIT_REQUEST_FIELDS,
    GUNICORN_LIMIT_REQUEST_LINE,
)
from observability.logs import DEFAULT_LOG_FORMAT, logging_config
from observability.metrics import multiproc

limit_request_line = GUNICORN_LIMIT_REQUEST_LINE
limit_request_field_size = GUNICORN_LIMIT_REQUEST_FIELD_SIZE
limit_request_fields = GUNICORN_LIMIT_REQUEST_FIELDS

logconfig_dict = logging_config(
    log_format=os.environ.get("LOG_FORMAT", DEFAULT_LOG_FORMAT),
    level=os.environ.get("LOG_LEVEL", "INFO"),
)


def on_starting(server: Any) -> None:
    multiproc.reset_directory()


def child_exit(server: Any, worker: Any) -> None:
    multiproc.mark_dead(worker.pid)
