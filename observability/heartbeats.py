"""When the audit and each periodic job last finished, kept in one Redis hash.

A gauge computed at scrape time reads it (``metrics.gauges``), so the answer
is the same whichever process ran the job or serves the scrape, and survives
a worker restart (a multiprocess gauge would not). One hash per database,
like the runner locks: two shops sharing a Redis do not mix their books.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings

from edge.redis import REDIS_DOWN, redis_client
from observability.metrics.instruments import observe_redis_unavailable

logger = logging.getLogger(__name__)

AUDIT_AT = "audit:at"
AUDIT_FINDINGS = "audit:findings"
JOB_PREFIX = "job:"


def _key() -> str:
    return f"onceshop:{settings.DATABASES['default']['NAME']}:heartbeats"


def _write(fields: dict[str, float]) -> None:
    # A heartbeat is bookkeeping about the work, never a reason for the work to fail:
    # if Redis is down the job's result stands, and the stale heartbeat alerts.
    try:
        redis_client().hset(_key(), mapping=fields)  # type: ignore[arg-type]  # invariant keys
    except REDIS_DOWN as error:
        observe_redis_unavailable(use="heartbeat")
        logger.warning("heartbeat not recorded: redis %s", type(error).__name__)


def audit_finished(*, findings: int) -> None:
    _write({AUDIT_AT: time.time(), AUDIT_FINDINGS: findings})


def job_succeeded(*, job: str) -> None:
    _write({JOB_PREFIX + job: time.time()})


def read() -> dict[str, float]:
    """Every heartbeat field -> its number (empty if nothing ran yet)."""
    raw: dict[bytes, bytes] = redis_client().hgetall(_key())  # type: ignore[assignment]
    return {name.decode(): float(value) for name, value in raw.items()}
