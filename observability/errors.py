"""The operational endpoints' answers as problem+json (see edge/errors.py)."""

from __future__ import annotations

from typing import Any

from edge.errors import ApplicationError


class NotReady(ApplicationError):
    """A dependency the shop needs (the database, Redis) does not answer or is not migrated."""

    status = 503
    code = "not-ready"
    title = "Not ready"
    default_detail = "A dependency is not ready."


class MetricsUnauthorized(ApplicationError):
    """``/metrics`` outside the demo needs ``Authorization: Bearer <METRICS_TOKEN>``."""

    status = 401
    code = "metrics-unauthorized"
    title = "Metrics need a token"
    default_detail = "Send Authorization: Bearer <METRICS_TOKEN> (see docs/operating.md)."

    def __init__(self, detail: str | None = None, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.headers["WWW-Authenticate"] = "Bearer"
