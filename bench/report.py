"""The run's report: the same figures on stdout, in results.md and in results.json."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.context import Options, SuiteResult
from bench.markdown import fmt, table
from bench.pgsessions import STATES
from bench.stats import Metric, Throughput, ratio


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


def _proc_field(path: str, name: str) -> str:
    try:
        with open(path) as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return "unknown"


def load_average() -> str:
    return " ".join(f"{load:.2f}" for load in os.getloadavg())


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


# --- Markdown -------------------------------------------------------------------------------


_THROUGHPUT_COLUMNS = ["scenario", "req/s", "p50 ms", "p95 ms", "p99 ms", "ok", "non-2xx"]
_RESOURCE_COLUMNS = ["where the time went", "server CPU", "CPU ms/req", "client CPU"]
_RESOURCES_LEGEND = (
    "CPU in cores (1.00 = one core busy all the time), averaged over warm-up and "
    "measurement: the app server's processes, their CPU time per successful request, "
    "and the load generator. PG: mean number of bench-database sessions running a "
    "statement, blocked on a lock, idle in transaction (waiting for the app's next "
    "statement) and idle, sampled every 50 ms."
)


def _throughput_table(rows: list[Throughput]) -> str:
    return table(
        [*_THROUGHPUT_COLUMNS, "errors", "unexpected"],
        [
            [
                row.label,
                fmt(row.per_second),
                fmt(row.p50_ms, 2),
                fmt(row.p95_ms, 2),
                fmt(row.p99_ms, 2),
                str(row.ok),
                str(row.non_2xx),
                str(row.errors),
                str(row.unexpected),
            ]
            for row in rows
        ],
    )


def _resources_table(rows: list[Throughput]) -> str:
    """CPU in cores (1.00 = one core all the time) and the database sessions' states."""
    return table(
        [*_RESOURCE_COLUMNS, *(f"PG {state}" for state in STATES)],
        [
            [
                row.label,
                fmt(row.server_cpu, 2),
                fmt(ratio(row.server_cpu * 1000, row.per_second), 2),
                fmt(row.client_cpu, 2),
                *(fmt(row.pg_sessions.get(state, math.nan)) for state in STATES),
            ]
            for row in rows
        ],
    )


def _metric_value(metric: Metric) -> str:
    if math.isnan(metric.value):
        return "n/a"
    if metric.unit == "x":
        return f"{fmt(metric.value, 2)}x"
    if metric.unit == "ms":
        return f"{fmt(metric.value, 2)} ms"
    if metric.unit == "fine":  # small counts that are not whole (statements per attempt)
        return fmt(metric.value, 3)
    return fmt(metric.value, 0)


def metrics_table(metrics: list[Metric]) -> str:
    return table(
        ["figure", "value", "target", "verdict", "note"],
        [[m.label, _metric_value(m), str(m.target or "-"), m.verdict, m.note] for m in metrics],
        align="lrrll",
    )


def _suite_markdown(suite: SuiteResult) -> str:
    parts = [f"## {suite.title}"]
    if suite.throughputs:
        parts.append(_throughput_table(suite.throughputs))
        parts.append(_resources_table(suite.throughputs) + "\n\n" + _RESOURCES_LEGEND)
    if suite.metrics:
        parts.append(metrics_table(suite.metrics))
    parts += [f"### {section.title}\n\n{section.markdown}" for section in suite.sections]
    return "\n\n".join(parts)


def markdown(report: RunReport) -> str:
    machine, options = report.machine, report.options
    packages = ", ".join(f"{name} {version}" for name, version in machine.packages.items())
    header = "\n".join(
        [
            "# OnceShop bench results",
            "",
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
    )
    return "\n\n".join([header, *map(_suite_markdown, report.suites)]) + "\n"


# --- JSON -----------------------------------------------------------------------------------


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
