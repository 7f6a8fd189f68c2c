"""The reads behind the heartbeat gauges (one Redis hash), and the one shape every app's
own gauge read takes (``payments.selectors``, ``reconcile.selectors``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Count, Min, QuerySet
from django.utils import timezone

from observability import heartbeats


def _age_s(oldest: datetime | None) -> float:
    return (timezone.now() - oldest).total_seconds() if oldest else 0.0


def count_and_age(rows: QuerySet[Any], since: str) -> tuple[float, float]:
    """How many rows, and the age in seconds of the oldest by ``since`` (0 if none):
    one aggregate, for ``gauges.count_and_age_gauges``."""
    found = rows.aggregate(n=Count("id"), oldest=Min(since))
    return float(found["n"]), _age_s(found["oldest"])


def audit_findings() -> float | None:
    return heartbeats.read().get(heartbeats.AUDIT_FINDINGS)


def audit_last_run() -> float | None:
    return heartbeats.read().get(heartbeats.AUDIT_AT)


def jobs_last_success() -> dict[str, float]:
    prefix = heartbeats.JOB_PREFIX
    return {
        name.removeprefix(prefix): at
        for name, at in heartbeats.read().items()
        if name.startswith(prefix)
    }
