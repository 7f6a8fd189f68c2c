"""Django in the bench process itself, on the bench database: seeding, the SQL of
one request, and requests timed one at a time through Django's test ``Client``
(the whole middleware and DRF stack without gunicorn and the socket: the cost of
one request, away from concurrency and from the noise of a shared machine).

Phases: a ``Stopwatch`` swaps chosen functions for timing wrappers for the length
of a block and sums the time spent inside each under a label; the app is untouched.
"""

from __future__ import annotations

import os
import secrets
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from unittest import mock

from tools.bench.appserver import django_env
from tools.bench.context import Section
from tools.bench.markdown import fmt, table

if TYPE_CHECKING:
    from django.test import Client

BENCH_USERNAME = "bench"
# The DRF token authentication query; everything else a request runs is its own.
AUTH_TABLE = '"authtoken_token"'


def setup_django(*, database_url: str, redis_url: str) -> None:
    """Configure Django on the bench database (call once, before importing models)."""
    os.environ.update(django_env(database_url=database_url, redis_url=redis_url))
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
    return int(user.pk), str(Token.objects.create(user=user).key)


def close_connections() -> None:
    """Hand the bench database's connections back (the next run drops it)."""
    from django.db import connections

    connections.close_all()


def post(client: Client, path: str, body: object, headers: dict[str, str], status: int) -> None:
    """POST JSON through the test client; any other status than ``status`` is a
    broken set-up, not a figure: raise."""
    response = client.post(path, body, content_type="application/json", headers=headers)
    if response.status_code != status:
        raise RuntimeError(f"in-process {path}: {response.status_code} {response.content!r}")


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
    return QueryCount(len(sql), sum(1 for s in sql if AUTH_TABLE not in s), sql)


def sql_section(title: str, count: QueryCount) -> Section:
    def short(sql: str) -> str:
        text = " ".join(sql.split())
        return text if len(text) <= 110 else text[:107] + "..."

    lines = "\n".join(f"{i:2d}. `{short(sql)}`" for i, sql in enumerate(count.sql, start=1))
    title = f"{title}: {count.total} statements, {count.beyond_auth} beyond authentication"
    return Section(title, lines)


def ms_per_call(call: Callable[[], object], iterations: int) -> float:
    """Mean wall time of ``call`` in milliseconds, one at a time in this thread."""
    started = time.perf_counter()
    for _ in range(iterations):
        call()
    return (time.perf_counter() - started) * 1000 / iterations


# --- Phases -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """Time every call of ``owner.attribute``, charged to ``label``, which may be a
    function of the call's arguments (which phase an ``atomic_phase`` call is)."""

    owner: Any
    attribute: str
    label: str | Callable[..., str]


@dataclass
class Stopwatch:
    """Wall time spent inside probed functions, summed per label, in this process."""

    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def _timed(self, probe: Probe, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            label = probe.label if isinstance(probe.label, str) else probe.label(*args, **kwargs)
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - started

        return timed

    @contextmanager
    def probing(self, probes: Sequence[Probe]) -> Iterator[None]:
        with ExitStack() as stack:
            for probe in probes:
                original = getattr(probe.owner, probe.attribute)
                timed = self._timed(probe, original)
                stack.enter_context(mock.patch.object(probe.owner, probe.attribute, timed))
            yield


@dataclass(frozen=True)
class Timed:
    """Where ``iterations`` requests, one at a time in this process, spent their time."""

    iterations: int
    total_s: float
    seconds: dict[str, float]

    @property
    def ms_per_request(self) -> float:
        return self.total_s * 1000 / self.iterations


def time_phases(call: Callable[[], object], iterations: int, probes: Sequence[Probe]) -> Timed:
    """``iterations`` calls of ``call``, the time inside each probe summed by label."""
    stopwatch = Stopwatch()
    with stopwatch.probing(probes):
        started = time.perf_counter()
        for _ in range(iterations):
            call()
        total = time.perf_counter() - started
    return Timed(iterations, total, dict(stopwatch.seconds))


def phase_rows(
    seconds: Mapping[str, float],
    *,
    phases: Sequence[str],
    nested: Sequence[str] = (),
    remainder: str,
    total_s: float,
    iterations: int,
) -> list[tuple[str, float, float]]:
    """(label, ms per request, share of the request) of each phase, then of what no
    phase covers (``remainder``: the phases must not overlap), then of the ``nested``
    labels, which lie inside a phase: shown with a "- " prefix, never subtracted."""
    if iterations <= 0 or total_s <= 0:
        raise ValueError("nothing was timed")
    spent = [(label, seconds.get(label, 0.0)) for label in phases]
    spent.append((remainder, total_s - sum(s for _, s in spent)))
    spent += [(f"- {label}", seconds.get(label, 0.0)) for label in nested]
    return [(label, s * 1000 / iterations, s / total_s) for label, s in spent]


def phase_section(
    title: str, intro: str, timed: Timed, *, phases: Sequence[str], nested: Sequence[str], rest: str
) -> Section:
    rows = phase_rows(
        timed.seconds,
        phases=phases,
        nested=nested,
        remainder=rest,
        total_s=timed.total_s,
        iterations=timed.iterations,
    )
    body = table(
        ["phase", "ms/request", "%"],
        [[label, fmt(ms, 2), fmt(share * 100)] for label, ms, share in rows]
        + [["whole request", fmt(timed.ms_per_request, 2), "100.0"]],
    )
    return Section(title, f"{intro}\n\n{body}")
