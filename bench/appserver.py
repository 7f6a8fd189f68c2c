"""The app under test: gunicorn started the way a deployment starts it.

One server per scenario group, on a free loopback port, with production
settings pointed at the bench database; always stopped when its block ends.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.client import HTTPConnection, HTTPException
from pathlib import Path

from bench.inprocess import BENCH_LIMITS

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"

# gunicorn imports Django in each worker: a few seconds on a busy machine. A server
# that is not up after this long will not come up.
READY_TIMEOUT_S = 60.0
# SIGTERM lets gunicorn finish in-flight requests; after this we SIGKILL.
STOP_TIMEOUT_S = 20.0
# DRF's UserRateThrottle keeps, per user, the list of request times inside its
# window and round-trips that whole list through Redis on every request. A
# per-second window keeps the list at one second of traffic, so the throttle
# costs what it costs at a realistic rate; a per-minute window would make the
# bench user's list 60x longer than any real client's and measure the list.
THROTTLE_RATE = BENCH_LIMITS["API_THROTTLE_RATE"]


@dataclass(frozen=True)
class Server:
    name: str
    port: int
    log_path: Path
    pid: int  # gunicorn's master; its workers are its children


def free_port() -> int:
    """A TCP port on loopback that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def gunicorn_command(port: int, bin_dir: str | None = None) -> list[str]:
    """The deployment's server: gthread, 2 workers x 8 threads (as ``make demo``);
    from another virtualenv's ``bin_dir`` when given (the peers suite's)."""
    return [
        os.path.join(bin_dir or os.path.dirname(sys.executable), "gunicorn"),
        "config.wsgi:application",
        "--worker-class",
        "gthread",
        "--workers",
        "2",
        "--threads",
        "8",
        "--bind",
        f"{HOST}:{port}",
    ]


def app_env(
    *, database_url: str, redis_url: str, overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of an app process under test: production settings, bench database."""
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "DEBUG": "false",
        **BENCH_LIMITS,
        "IDEMPOTENCY_ENABLED": "true",
        "LOG_LEVEL": "WARNING",
        **(overrides or {}),
    }


def _is_ready(port: int) -> bool:
    conn = HTTPConnection(HOST, port, timeout=2)
    try:
        conn.request("GET", "/api/v1/products/")
        response = conn.getresponse()
        response.read()
        return response.status == 200
    except (OSError, HTTPException):
        return False
    finally:
        conn.close()


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_ready(process: subprocess.Popen[bytes], server: Server) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _is_ready(server.port):
        if process.poll() is not None:
            raise RuntimeError(
                f"gunicorn {server.name} exited with {process.returncode}:\n"
                f"{_log_tail(server.log_path)}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"gunicorn {server.name} not ready after {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def gunicorn(
    *, name: str, env: Mapping[str, str], log_dir: Path, bin_dir: str | None = None
) -> Iterator[Server]:
    """Run gunicorn until the block ends (normally, by error or by Ctrl-C)."""
    port, log_path = free_port(), log_dir / f"gunicorn-{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            gunicorn_command(port, bin_dir),
            cwd=ROOT,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        server = Server(name=name, port=port, log_path=log_path, pid=process.pid)
        try:
            _wait_ready(process, server)
            yield server
            if process.poll() is not None:  # figures from a dead server are not figures
                raise RuntimeError(
                    f"gunicorn {name} exited during the run ({process.returncode}):\n"
                    f"{_log_tail(log_path)}"
                )
        finally:
            _stop(process)


def _proc_stat(pid_dir: Path) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces)."""
    try:
        text = (pid_dir / "stat").read_text()
    except OSError:  # the process ended while we looked
        return None
    return text.rpartition(")")[2].split()


def tree_cpu_seconds(root_pid: int) -> float:
    """CPU time (user + system) used so far by a process and its children.

    Live children are read directly; children that exited (a restarted gunicorn
    worker) are in the parent's cutime/cstime once reaped. Linux only (reads
    /proc); NaN elsewhere. Fields per proc(5): ppid 4, utime 14, stime 15,
    cutime 16, cstime 17; after the command name, field n is at index n - 3.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return math.nan
    ticks = 0
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        fields = _proc_stat(pid_dir)
        if not fields:
            continue
        if pid_dir.name == str(root_pid):
            ticks += sum(int(value) for value in fields[11:15])
        elif fields[1] == str(root_pid):
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")
