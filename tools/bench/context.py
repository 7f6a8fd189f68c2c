"""What every suite receives (options, bench database, bench user) and returns.

A suite is one module exposing ``SUITE = Suite(name, title, run)``; ``run``
takes a ``BenchContext`` and returns a ``SuiteResult``, which the report renders
the same way for any suite.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tools.bench.appserver import Server, app_env, gunicorn
from tools.bench.harness import Drive, RequestFactory, measure
from tools.bench.stats import Metric, Throughput

DEFAULT_SECONDS, QUICK_SECONDS = 10.0, 2.0
DEFAULT_WARMUP_S, QUICK_WARMUP_S = 2.0, 0.5
CLIENTS = 16
PROFILE_ITERATIONS, QUICK_PROFILE_ITERATIONS = 300, 30


def parse_options(argv: list[str], environ: dict[str, str]) -> Options:
    """Options from the command line; ``BENCH_SECONDS`` overrides the measured period."""
    description = "Run OnceShop's benchmarks and report (docs/benchmarks.md)."
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=description)
    parser.add_argument("--quick", action="store_true", help="2 s per scenario: a smoke run")
    parser.add_argument(
        "--suite", action="append", default=[], help="run only this suite (repeatable)"
    )
    args = parser.parse_args(argv)
    default = QUICK_SECONDS if args.quick else DEFAULT_SECONDS
    seconds = float(environ.get("BENCH_SECONDS") or default)
    if seconds <= 0:
        parser.error("BENCH_SECONDS must be positive")
    return Options(
        measure_s=seconds,
        warmup_s=QUICK_WARMUP_S if args.quick else DEFAULT_WARMUP_S,
        clients=CLIENTS,
        profile_iterations=QUICK_PROFILE_ITERATIONS if args.quick else PROFILE_ITERATIONS,
        quick=args.quick,
        suites=tuple(args.suite),
    )


@dataclass(frozen=True)
class Options:
    measure_s: float  # measured period of each scenario
    warmup_s: float  # discarded period before it (connections, caches, JIT-less warm paths)
    clients: int
    profile_iterations: int
    quick: bool
    suites: tuple[str, ...] = ()  # empty: all registered suites


@dataclass(frozen=True)
class BenchContext:
    options: Options
    database_url: str  # the bench database, never the demo's
    redis_url: str
    out_dir: Path
    user_id: int
    token: str

    @property
    def drive(self) -> Drive:
        return Drive(self.options.clients, self.options.warmup_s, self.options.measure_s)

    @contextmanager
    def server(
        self, name: str, *, cpus: frozenset[int] | None = None, **env: str
    ) -> Iterator[Server]:
        """A gunicorn on the bench database, with ``env`` overriding the defaults (and on
        ``cpus`` only, when given)."""
        environment = app_env(
            database_url=self.database_url, redis_url=self.redis_url, overrides=env
        )
        with gunicorn(name=name, env=environment, log_dir=self.out_dir, cpus=cpus) as server:
            yield server

    def measure(self, server: Server, name: str, label: str, factory: RequestFactory) -> Throughput:
        """``harness.measure`` with this run's clients and periods, on the bench database."""
        return measure(
            name=name,
            label=label,
            server=server,
            factory=factory,
            plan=self.drive,
            database_url=self.database_url,
        )


@dataclass(frozen=True)
class Section:
    """Free-form findings of a suite (Markdown): query lists, profile cost centres."""

    title: str
    markdown: str


@dataclass(frozen=True)
class SuiteResult:
    name: str
    title: str
    throughputs: list[Throughput] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)


@dataclass(frozen=True)
class Suite:
    """A group of scenarios, registered in ``tools/bench/__main__.py``."""

    name: str
    title: str
    run: Callable[[BenchContext], SuiteResult]
