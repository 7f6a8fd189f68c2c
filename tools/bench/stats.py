"""Pure arithmetic of the bench: percentiles, throughput summaries, targets.

Nothing here touches a process, a socket or a database: tests/tools/bench checks it directly.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class Sample:
    """One answered (or failed) request, as the load generator saw it."""

    finished_at: float  # time.monotonic() when the answer was read
    latency_s: float
    status: int  # HTTP status; 0 when the request failed without an answer
    expected: bool = True  # False when a 2xx answer was not the kind the scenario expects


@dataclass(frozen=True)
class Throughput:
    """A scenario's figures over its measured window."""

    name: str
    label: str
    seconds: float
    per_second: float  # successful (2xx) requests, or transactions for pgbench
    p50_ms: float
    p95_ms: float
    p99_ms: float
    ok: int
    non_2xx: int = 0
    errors: int = 0  # no answer at all: connection reset, timeout
    unexpected: int = 0  # 2xx, but not what the scenario expects (e.g. not a replay)
    connections: int = 0  # TCP connections the clients opened (keep-alive: one each)
    # CPU used, in cores (1.0 = one core busy all the time), over the run: by the app
    # server's processes, and by the load generator, which on a small machine
    # competes with the server for the same CPUs.
    server_cpu: float = math.nan
    client_cpu: float = math.nan
    # CPU of the bench database's backends (PostgreSQL's side of the same requests), in cores.
    pg_cpu: float = math.nan
    pg_sessions: dict[str, float] = field(default_factory=dict)  # mean sessions per state
    statuses: dict[str, int] = field(default_factory=dict)


def cpu_ms_per_request(t: Throughput, *, with_database: bool = True) -> float:
    """CPU milliseconds one successful request cost: the server's, plus PostgreSQL's."""
    cores = t.server_cpu + (t.pg_cpu if with_database else 0.0)
    return cores * 1000 / t.per_second if t.per_second else math.nan


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (a value actually observed) of sorted values; NaN when empty."""
    if not sorted_values:
        return math.nan
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be within 0..1, not {fraction}")
    return sorted_values[max(1, math.ceil(fraction * len(sorted_values))) - 1]


def in_window(samples: Iterable[Sample], start: float, end: float) -> list[Sample]:
    """The samples answered inside [start, end): warm-up and stragglers are dropped."""
    return [sample for sample in samples if start <= sample.finished_at < end]


def summarize(*, name: str, label: str, samples: Sequence[Sample], seconds: float) -> Throughput:
    """Throughput and latency percentiles of the 2xx answers in ``samples``; other
    answers and failures are counted apart, so they cannot flatter a figure."""
    if seconds <= 0:
        raise ValueError("the measured window must be longer than zero")
    good = sorted(s.latency_s for s in samples if 200 <= s.status < 300)
    return Throughput(
        name=name,
        label=label,
        seconds=seconds,
        per_second=len(good) / seconds,
        p50_ms=percentile(good, 0.50) * 1000,
        p95_ms=percentile(good, 0.95) * 1000,
        p99_ms=percentile(good, 0.99) * 1000,
        ok=len(good),
        non_2xx=sum(1 for s in samples if s.status and not 200 <= s.status < 300),
        errors=sum(1 for s in samples if s.status == 0),
        unexpected=sum(1 for s in samples if 200 <= s.status < 300 and not s.expected),
        statuses=dict(sorted(Counter(str(s.status) for s in samples if s.status).items())),
    )


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``; NaN instead of an exception when nothing was measured."""
    if denominator == 0 or math.isnan(denominator) or math.isnan(numerator):
        return math.nan
    return numerator / denominator


@dataclass(frozen=True)
class Target:
    """A bound a metric should respect: ``value >= bound`` or ``value <= bound``."""

    op: Literal[">=", "<="]
    bound: float

    def met_by(self, value: float) -> bool:
        if math.isnan(value):
            return False
        return value >= self.bound if self.op == ">=" else value <= self.bound

    def __str__(self) -> str:
        return f"{self.op} {self.bound:g}"


@dataclass(frozen=True)
class Metric:
    """A derived figure (a ratio, a query count) with an optional target. The bench
    reports PASS or MISS but never fails on it: a benchmark informs, the tests assert."""

    name: str
    label: str
    value: float
    unit: str = ""
    target: Target | None = None
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "-"
        return "PASS" if self.target.met_by(self.value) else "MISS"


# A suite's figure: (name, label, unit, target), in the order its report lists them.
Figure = tuple[str, str, str, Target | None]


def figures(
    specs: Sequence[Figure], values: Mapping[str, float], notes: Mapping[str, str]
) -> list[Metric]:
    """The metrics of ``specs``, valued from ``values`` and annotated from ``notes``, by name."""
    return [
        Metric(n, label, values[n], unit, target, notes.get(n, ""))
        for n, label, unit, target in specs
    ]
