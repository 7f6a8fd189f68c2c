"""Order creation inside the bench process: its SQL, its service time, its profile.

Requests go through Django's test ``Client``: the whole middleware, DRF and
idempotency stack on the bench database, without gunicorn and the socket, one
request at a time. That isolates the cost of one request from concurrency
(and from the noise of a shared machine) and lets pyinstrument see inside it.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

from django.test import Client, override_settings

from bench.context import Section
from bench.inprocess import QueryCount, count_queries, ms_per_call
from bench.markdown import fmt, table
from bench.profiling import ProfileResult, Share, Step, profile

PATH = "/api/v1/orders/"
# The in-process timings alternate layer on / off this many times, so a burst of
# load from elsewhere hits both alike.
SERVICE_TIME_ROUNDS = 3

# What the profile names, in request order. Steps nest ("-" marks those inside
# the atomic phase), so their shares do not add up to 100 %.
STEPS = (
    Step("DRF view, whole (APIView.dispatch)", "dispatch", "rest_framework/views.py"),
    Step(
        "authentication (TokenAuthentication)", "authenticate", "rest_framework/authentication.py"
    ),
    Step("throttle (UserRateThrottle, Redis)", "allow_request", "rest_framework/throttling.py"),
    Step("body validation (InputSerializer)", "is_valid", "rest_framework/serializers.py"),
    Step("key lookup (idempotency.core._acquire)", "_acquire", "idempotency/core.py"),
    Step("atomic phase (idempotency.core.atomic_phase)", "atomic_phase", "idempotency/core.py"),
    Step("- order_create service", "order_create", "orders/services.py"),
    Step("- response body (OrderOutputSerializer.data)", "data", "rest_framework/serializers.py"),
    Step("- transaction exits (savepoints, COMMIT)", "__exit__", "django/db/transaction.py"),
    Step("response rendering (JSONRenderer)", "render", "rest_framework/renderers.py"),
)


def order_poster(*, token: str, sku: str) -> Callable[[str], None]:
    """POST one one-line order with ``key``; anything but 201 is a broken set-up: raise."""
    client = Client()
    body = json.dumps({"lines": [{"sku": sku, "quantity": 1}]})

    def post(key: str) -> None:
        response = client.post(
            PATH,
            body,
            content_type="application/json",
            headers={"Authorization": f"Token {token}", "Idempotency-Key": key},
        )
        if response.status_code != 201:
            raise RuntimeError(f"in-process order: {response.status_code} {response.content!r}")

    return post


def _fresh(post: Callable[[str], None]) -> Callable[[], None]:
    return lambda: post(str(uuid.uuid4()))


def query_counts(post: Callable[[str], None]) -> tuple[QueryCount, QueryCount]:
    """The SQL of a first-time creation and of its replay (after one warm-up request)."""
    _fresh(post)()  # connection open, caches filled
    key = str(uuid.uuid4())
    return count_queries(lambda: post(key)), count_queries(lambda: post(key))


@dataclass(frozen=True)
class ServiceTimes:
    """Mean ms per request, one at a time in this process: no server, no concurrency."""

    first_ms: float
    layer_off_ms: float
    replay_ms: float


def service_times(post: Callable[[str], None], *, iterations: int) -> ServiceTimes:
    """First-time creation with the key layer on and off (alternating), then replays."""
    per_round = max(1, iterations // SERVICE_TIME_ROUNDS)
    on, off = [], []
    for _ in range(SERVICE_TIME_ROUNDS):
        on.append(ms_per_call(_fresh(post), per_round))
        with override_settings(IDEMPOTENCY_ENABLED=False):
            off.append(ms_per_call(_fresh(post), per_round))
    post(replay_key := str(uuid.uuid4()))
    replay = ms_per_call(lambda: post(replay_key), iterations)
    return ServiceTimes(first_ms=fmean(on), layer_off_ms=fmean(off), replay_ms=replay)


def profile_first_time(
    post: Callable[[str], None], *, iterations: int, out_path: Path
) -> ProfileResult:
    return profile(_fresh(post), iterations=iterations, steps=STEPS, out_path=out_path)


# --- Report sections -----------------------------------------------------------------------


def _share_rows(shares: list[Share], iterations: int) -> list[list[str]]:
    return [
        [share.label, fmt(share.seconds * 1000 / iterations, 2), fmt(share.share * 100)]
        for share in shares
    ]


def profile_section(result: ProfileResult) -> Section:
    by_layer = _share_rows(result.by_layer, result.iterations)
    by_step = _share_rows(result.by_step, result.iterations)
    return Section(
        title=f"Where a first-time creation spends its time ({result.iterations} requests)",
        markdown=(
            "In-process through Django's test client (no gunicorn, no socket), one request "
            f"at a time, under pyinstrument: {fmt(result.ms_per_request, 2)} ms per request, "
            "the profiler's own overhead included (it inflates Python-heavy parts). Top of "
            f"the profile: `{os.path.relpath(result.text_path)}`.\n\n"
            + table(["by layer (innermost non-stdlib frame)", "ms/request", "%"], by_layer)
            + "\n\n"
            + table(["by step (inclusive; steps nest)", "ms/request", "%"], by_step)
        ),
    )


def sql_section(title: str, count: QueryCount) -> Section:
    def short(sql: str) -> str:
        text = " ".join(sql.split())
        return text if len(text) <= 110 else text[:107] + "..."

    lines = "\n".join(f"{i:2d}. `{short(sql)}`" for i, sql in enumerate(count.sql, start=1))
    return Section(
        title=f"{title}: {count.total} statements, {count.beyond_auth} beyond authentication",
        markdown=lines,
    )
