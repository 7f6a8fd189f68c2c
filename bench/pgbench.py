"""Run a custom pgbench script against the bench database and read its figures.

pgbench is PostgreSQL's own load generator (C, one prepared statement per
step, no ORM, no HTTP): what it reaches for a transaction is the ceiling the
app can approach, never pass, for the same writes on the same machine.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from bench.database import libpq_uri
from bench.stats import Sample, Throughput, summarize

# pgbench stops by itself after -T seconds; this only bounds a hung server.
TIMEOUT_MARGIN_S = 60

_TPS = re.compile(r"^tps = ([0-9.]+) \((?:without|excluding)", re.MULTILINE)
_FAILED = re.compile(r"^number of failed transactions: (\d+)", re.MULTILINE)


def find_pgbench() -> str:
    """pgbench from PATH, else the one shipped with the embedded server (pgserver)."""
    found = shutil.which("pgbench")
    if found:
        return found
    import pgserver

    shipped = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench"
    if shipped.exists():
        return str(shipped)
    raise RuntimeError("pgbench not found: install postgresql-client or pgserver")


@dataclass(frozen=True)
class PgbenchPlan:
    clients: int
    threads: int
    seconds: int


def command(
    *, pgbench: str, url: str, script: Path, plan: PgbenchPlan, log_prefix: Path | None
) -> list[str]:
    """The pgbench command line: no vacuum, prepared statements, time-bounded."""
    args = [
        pgbench,
        "-n",  # no vacuum: our tables are not pgbench's
        "-M",
        "prepared",
        "-c",
        str(plan.clients),
        "-j",
        str(plan.threads),
        "-T",
        str(plan.seconds),
        "-f",
        str(script),
    ]
    if log_prefix is not None:
        # One line per transaction, with its latency: gives percentiles like the HTTP runs.
        args += ["-l", f"--log-prefix={log_prefix}"]
    return [*args, libpq_uri(url)]  # a URI works as the dbname argument, sockets included


def parse_tps(output: str) -> float:
    match = _TPS.search(output)
    if match is None:
        raise ValueError(f"no tps line in pgbench output:\n{output}")
    return float(match.group(1))


def parse_failed(output: str) -> int:
    match = _FAILED.search(output)
    return int(match.group(1)) if match else 0


def parse_log(lines: Iterable[str]) -> list[float]:
    """Latencies (seconds) of the committed transactions in pgbench ``-l`` log lines.

    A line is ``client_id transaction_no time script_no time_epoch time_us ...``
    where ``time`` is the latency in microseconds (or ``failed``/``skipped``).
    """
    latencies = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and fields[2].isdigit():
            latencies.append(int(fields[2]) / 1_000_000)
    return latencies


def run(*, url: str, script: Path, plan: PgbenchPlan, log_prefix: Path | None = None) -> str:
    """Run pgbench to completion; return its report (stdout)."""
    completed = subprocess.run(
        command(pgbench=find_pgbench(), url=url, script=script, plan=plan, log_prefix=log_prefix),
        capture_output=True,
        text=True,
        timeout=plan.seconds + TIMEOUT_MARGIN_S,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"pgbench failed ({completed.returncode}):\n{completed.stderr}")
    return completed.stdout


def measure(
    *, name: str, label: str, url: str, script: Path, plan: PgbenchPlan, log_dir: Path
) -> Throughput:
    """One measured pgbench run: pgbench's own tps, percentiles from its per-transaction log."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob(f"{name}*"):
        old.unlink()
    output = run(url=url, script=script, plan=plan, log_prefix=log_dir / name)
    latencies: list[float] = []
    for log_file in sorted(log_dir.glob(f"{name}.*")):
        with log_file.open() as lines:
            latencies += parse_log(lines)
    # The log's latencies give the percentiles; pgbench's tps (which excludes the
    # connection set-up) gives the throughput.
    samples = [Sample(finished_at=0.0, latency_s=latency, status=200) for latency in latencies]
    summary = summarize(name=name, label=label, samples=samples, seconds=plan.seconds)
    return replace(
        summary,
        per_second=parse_tps(output),
        errors=parse_failed(output),
        statuses={},
        connections=plan.clients,
    )
