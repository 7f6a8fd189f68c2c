"""The run's report: the same figures on stdout, in results.md and in results.json."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from tools.bench.context import Options, SuiteResult
from tools.bench.harness import STATES
from tools.bench.markdown import fmt, table
from tools.bench.stats import Metric, Throughput, ratio

RESOURCES_LEGEND = (
    "CPU in cores (1.00 = one core busy all the time), averaged over warm-up and "
    "measurement: the app server's processes, their CPU time per successful request, "
    "the bench database's PostgreSQL backends' CPU time per successful request (read "
    "from /proc for every backend seen during the run), and the load generator. "
    "PG: mean number of bench-database sessions running a "
    "statement, blocked on a lock, idle in transaction (waiting for the app's next "
    "statement) and idle, sampled every 50 ms."
)


@dataclass(frozen=True)
class Machine:
    date: str
    nproc: int
    cpu_model: str
    memory: str
    postgres: str
    python: str
    packages: dict[str, str]
    load_average_before: str


@dataclass(frozen=True)
class RunReport:
    command: str
    options: Options
    machine: Machine
    suites: list[SuiteResult]
    wall_s: float
    load_average_after: str


def load_average() -> str:
    return " ".join(f"{load:.2f}" for load in os.getloadavg())


def _proc_field(path: str, name: str) -> str:
    try:
        fields = [line.partition(":") for line in Path(path).read_text().splitlines()]
    except OSError:
        return "unknown"
    return next((value.strip() for key, _, value in fields if key.strip() == name), "unknown")


def machine_info(postgres_version: str) -> Machine:
    return Machine(
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        nproc=len(os.sched_getaffinity(0)),
        cpu_model=_proc_field("/proc/cpuinfo", "model name"),
        memory=_proc_field("/proc/meminfo", "MemTotal"),
        postgres=postgres_version,
        python=f"{platform.python_implementation()} {platform.python_version()}",
        packages={
            name: metadata.version(name)
            for name in ("django", "djangorestframework", "gunicorn", "psycopg")
        },
        load_average_before=load_average(),
    )


def finish(
    command: str, options: Options, machine: Machine, suites: list[SuiteResult], started: float
) -> RunReport:
    """The report of a run that began at ``started`` (``time.monotonic()``) and ends now."""
    return RunReport(command, options, machine, suites, time.monotonic() - started, load_average())


def _throughput_tables(rows: list[Throughput]) -> str:
    def scenario(r: Throughput) -> list[str]:
        latencies = (fmt(ms, 2) for ms in (r.p50_ms, r.p95_ms, r.p99_ms))
        counts = map(str, (r.ok, r.non_2xx, r.errors, r.unexpected))
        return [r.label, fmt(r.per_second), *latencies, *counts]

    def resources(r: Throughput) -> list[str]:
        sessions = (fmt(r.pg_sessions.get(state, math.nan)) for state in STATES)
        cpu_ms = fmt(ratio(r.server_cpu * 1000, r.per_second), 2)
        pg_ms = fmt(ratio(r.pg_cpu * 1000, r.per_second), 2)
        return [r.label, fmt(r.server_cpu, 2), cpu_ms, pg_ms, fmt(r.client_cpu, 2), *sessions]

    columns = ["scenario", "req/s", "p50 ms", "p95 ms", "p99 ms", "ok", "non-2xx", "errors"]
    first = table([*columns, "unexpected"], [scenario(r) for r in rows])
    pg = [f"PG {state}" for state in STATES]
    second = table(
        ["where the time went", "server CPU", "CPU ms/req", "PG CPU ms/req", "client CPU", *pg],
        [resources(r) for r in rows],
    )
    return f"{first}\n\n{second}\n\n{RESOURCES_LEGEND}"


def _metric_value(metric: Metric) -> str:
    if math.isnan(metric.value):
        return "n/a"
    if metric.unit in ("x", "ms"):
        return f"{fmt(metric.value, 2)}{'x' if metric.unit == 'x' else ' ms'}"
    if metric.unit == "fine":  # small counts that are not whole (statements per attempt)
        return fmt(metric.value, 3)
    return fmt(metric.value, 0)


def metrics_table(metrics: list[Metric]) -> str:
    return table(
        ["figure", "value", "target", "verdict", "note"],
        [[m.label, _metric_value(m), str(m.target or "-"), m.verdict, m.note] for m in metrics],
        align="lrrll",
    )


def markdown(report: RunReport) -> str:
    machine, options = report.machine, report.options
    packages = ", ".join(f"{name} {version}" for name, version in machine.packages.items())
    parts = [
        "# OnceShop bench results\n",
        f"- date: {machine.date}",
        f"- command: `{report.command}`",
        f"- machine: {machine.nproc} CPUs ({machine.cpu_model}), {machine.memory} RAM",
        f"- load average (1/5/15 min): {machine.load_average_before} before, "
        f"{report.load_average_after} after",
        f"- PostgreSQL: {machine.postgres}",
        f"- {machine.python}; {packages}",
        f"- {options.clients} clients, {options.warmup_s:g} s warm-up + "
        f"{options.measure_s:g} s measured per scenario; whole run {report.wall_s:.0f} s",
    ]
    text = "\n".join(parts)
    for suite in report.suites:
        text += f"\n\n## {suite.title}"
        if suite.throughputs:
            text += "\n\n" + _throughput_tables(suite.throughputs)
        if suite.metrics:
            text += "\n\n" + metrics_table(suite.metrics)
        text += "".join(f"\n\n### {s.title}\n\n{s.markdown}" for s in suite.sections)
    return text + "\n"


def _json_safe(value: Any) -> Any:
    """NaN and infinities are not JSON: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return value


def to_json(report: RunReport) -> str:
    data = _json_safe(dataclasses.asdict(report))
    return json.dumps(data, indent=2, default=str, allow_nan=False) + "\n"


def write(report: RunReport, out_dir: Path) -> tuple[Path, Path]:
    md_path, json_path = out_dir / "results.md", out_dir / "results.json"
    md_path.write_text(markdown(report))
    json_path.write_text(to_json(report))
    return md_path, json_path
