"""Django in the bench process itself, pointed at the bench database.

Used for what needs no HTTP server: seeding, counting the SQL of one request,
and timing or profiling requests through Django's test ``Client`` (the full
middleware and DRF stack, without gunicorn and the socket).
"""

from __future__ import annotations

import os
import secrets
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

BENCH_USERNAME = "bench"
# One bench user stands for thousands of clients: its per-user limits are raised far
# out of the way, not turned off, so what checking them costs stays in the figures.
# DRF's throttle window is per second (see bench/appserver.py for why).
BENCH_LIMITS = {
    "API_THROTTLE_RATE": "100000000/s",
    "CALLBACK_RATE_PER_ADDRESS": "100000000/s",
    "MAX_OPEN_ORDERS_PER_USER": str(10**9),
    "MAX_KEYS_PER_USER_PER_HOUR": str(10**9),
}
# The DRF token authentication query; everything else a request runs is its own.
AUTH_TABLE = '"authtoken_token"'


def setup_django(*, database_url: str, redis_url: str) -> None:
    """Configure Django on the bench database (call once, before importing models)."""
    os.environ["DATABASE_URL"] = database_url
    os.environ["REDIS_URL"] = redis_url
    os.environ["DEBUG"] = "false"
    os.environ["IDEMPOTENCY_ENABLED"] = "true"
    os.environ.update(BENCH_LIMITS)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # The bench serves no static files; whitenoise's note that `collectstatic` never
    # ran would only clutter the report.
    warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
    import django

    django.setup()


def create_bench_user() -> tuple[int, str]:
    """The user every bench request acts as, and its DRF token."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user = get_user_model().objects.create_user(
        username=BENCH_USERNAME, password=secrets.token_urlsafe(16)
    )
    token = Token.objects.create(user=user)
    return int(user.pk), str(token.key)


@dataclass(frozen=True)
class QueryCount:
    total: int
    beyond_auth: int  # the queries that are not authentication's
    sql: list[str]


def count_queries(call: Callable[[], object]) -> QueryCount:
    """The SQL statements ``call`` runs (savepoints included; BEGIN/COMMIT are not SQL here)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        call()
    sql = [query["sql"] for query in captured.captured_queries]
    return QueryCount(
        total=len(sql),
        beyond_auth=sum(1 for statement in sql if AUTH_TABLE not in statement),
        sql=sql,
    )


def ms_per_call(call: Callable[[], object], iterations: int) -> float:
    """Mean wall time of ``call`` in milliseconds, one at a time in this thread."""
    started = time.perf_counter()
    for _ in range(iterations):
        call()
    return (time.perf_counter() - started) * 1000 / iterations


def close_connections() -> None:
    """Hand the bench database's connections back (the next run drops it)."""
    from django.db import connections

    connections.close_all()
