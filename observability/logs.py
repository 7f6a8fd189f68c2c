"""Log lines as JSON (one object per line) or plain text, each with the log context.

Standard library ``logging`` with a small formatter rather than structlog: every
library we run (Django, Celery, gunicorn, requests) already logs through the
standard library, so one formatter and one filter give all of their lines the
same shape and the same context, with no second logging pipeline to configure
(docs/operating.md says more).

Imported by ``config.settings``: standard library only, no Django.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from observability import context

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
# What production writes: one JSON object per line, for a log pipeline to parse.
DEFAULT_LOG_FORMAT = "json"

# Where the middleware leaves the request's context for Django's late lines.
LOG_CONTEXT_ATTRIBUTE = "onceshop_log_context"

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class ContextFilter(logging.Filter):
    """Copy the log context onto the record when it is *emitted*.

    A handler-level filter runs in the thread that logs, so the record carries
    that thread's request or task even if it is formatted later elsewhere.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "context"):
            record.context = context.current()
        return True


class DjangoRequestFilter(logging.Filter):
    """Django's ``django.request`` lines (4xx/5xx): the route instead of the raw path,
    and the request's log context although they are written after the request ended.

    A path can hold a secret (``/api/v1/idempotency-keys/<key>/`` holds a full
    Idempotency-Key); the route name tells an operator as much. Django logs these
    after the middleware has reset the context, so the middleware leaves a copy of
    it on the request (``LOG_CONTEXT_ATTRIBUTE``).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        if request is None:
            return True
        if isinstance(record.args, tuple) and len(record.args) == 2:
            match = getattr(request, "resolver_match", None)
            route = match.view_name if match else "unmatched"
            record.args = (record.args[0], f"route {route}")
        saved = getattr(request, LOG_CONTEXT_ATTRIBUTE, None)
        if saved is not None:
            record.context = saved
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, context, extras."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(getattr(record, "context", None) or {})
        line.update(
            (name, value)
            for name, value in vars(record).items()
            if name not in _STANDARD and name not in {"context", "request", "data"}
        )
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class PlainFormatter(logging.Formatter):
    """Human-readable lines for a console: the context as ``name=value`` at the end."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = getattr(record, "context", None) or {}
        if fields:
            text += " [" + " ".join(f"{name}={value}" for name, value in fields.items()) + "]"
        return text


def logging_config(*, log_format: str, level: str) -> dict[str, Any]:
    """``settings.LOGGING``: one console handler, JSON or plain, with the context filter."""
    if log_format not in {"json", "plain"}:
        raise ValueError(f"LOG_FORMAT must be 'json' or 'plain', not {log_format!r}")
    formatter = JsonFormatter if log_format == "json" else PlainFormatter
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "context": {"()": ContextFilter},
            "django_request": {"()": DjangoRequestFilter},
        },
        "formatters": {"main": {"()": formatter}},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "main",
                "filters": ["context"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "django.request": {"filters": ["django_request"]},
            # Celery's "Received task" line is written by the worker's main process,
            # which knows nothing of the task's request; our "task started" line
            # (observability.celery) says the same with the request id.
            "celery.worker.strategy": {"level": "WARNING"},
            # gunicorn's own lines (worker boots, timeouts) in the same format.
            "gunicorn.error": {"handlers": ["console"], "propagate": False},
        },
    }
