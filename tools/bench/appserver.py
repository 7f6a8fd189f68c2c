"""The app under test: gunicorn started the way a deployment starts it, on a free
loopback port, with production settings on the bench database; always stopped."""

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

from tools.bench import ROOT

HOST = "127.0.0.1"
# One bench user stands for thousands of clients: its per-user limits are raised far
# out of the way, not turned off, so what checking them costs stays in the figures.
BENCH_LIMITS = {
    "API_THROTTLE_RATE": "100000000/s",
    "CALLBACK_RATE_PER_ADDRESS": "100000000/s",
    "MAX_OPEN_ORDERS_PER_USER": str(10**9),
    "MAX_KEYS_PER_USER_PER_HOUR": str(10**9),
}
# gunicorn imports Django in each worker: a few seconds on a busy machine. A server
# that is not up after this long will not come up.
READY_TIMEOUT_S = 60.0
# SIGTERM lets gunicorn finish in-flight requests; after this we SIGKILL.
STOP_TIMEOUT_S = 20.0


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
    gunicorn = os.path.join(bin_dir or os.path.dirname(sys.executable), "gunicorn")
    options = f"--worker-class gthread --workers 2 --threads 8 --bind {HOST}:{port}"
    # Its settings file, as a deployment passes it (Dockerfile): limits, logs, hooks.
    config = ["--config", "python:config.gunicorn"]
    return [gunicorn, "config.wsgi:application", *config, *options.split()]


def django_env(*, database_url: str, redis_url: str) -> dict[str, str]:
    """What the app under test is configured with, in gunicorn and in the bench process."""
    return {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "DEBUG": "false",
        "IDEMPOTENCY_ENABLED": "true",
        **BENCH_LIMITS,
    }


def app_env(
    *, database_url: str, redis_url: str, overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of an app process under test: production settings, bench database."""
    env = django_env(database_url=database_url, redis_url=redis_url)
    return {**os.environ, **env, "LOG_LEVEL": "WARNING", **(overrides or {})}


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


@contextmanager
def gunicorn(
    *,
    name: str,
    env: Mapping[str, str],
    log_dir: Path,
    bin_dir: str | None = None,
    cpus: frozenset[int] | None = None,
) -> Iterator[Server]:
    """Run gunicorn until the block ends (normally, by error or by Ctrl-C); on ``cpus``
    only when given (Linux CPU affinity, inherited by its workers)."""
    port, log_path = free_port(), log_dir / f"gunicorn-{name}.log"

    def failed(what: str) -> RuntimeError:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        return RuntimeError(f"gunicorn {name} {what}:\n{tail}")

    with log_path.open("wb") as log:
        process = subprocess.Popen(
            gunicorn_command(port, bin_dir),
            cwd=ROOT,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not _is_ready(port):
                if process.poll() is not None:
                    raise failed(f"exited with {process.returncode}")
                if time.monotonic() > deadline:
                    raise failed(f"not ready after {READY_TIMEOUT_S:.0f} s")
                time.sleep(0.2)
            yield Server(name=name, port=port, log_path=log_path, pid=process.pid)
            if process.poll() is not None:  # figures from a dead server are not figures
                raise failed(f"exited during the run ({process.returncode})")
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


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
        try:  # after the command name, which may hold spaces
            fields = (pid_dir / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # the process ended while we looked
            continue
        if pid_dir.name == str(root_pid):
            ticks += sum(int(value) for value in fields[11:15])
        elif fields[1] == str(root_pid):
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")
