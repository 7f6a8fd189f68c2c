"""The reads behind the heartbeat gauges: one Redis hash (the apps' own gauges read
their own tables: ``payments.selectors``)."""

from __future__ import annotations

from observability import heartbeats


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
