"""`make demo` from a clean var dir: it starts, it serves, it restarts a killed
worker, and Ctrl-C leaves nothing running, embedded PostgreSQL and Redis included."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[3]
# Exactly what `make demo` runs (Makefile: $(WITH_SERVICES) $(PY) -m demo.runner).
DEMO = [".venv/bin/python", "-m", "config.embedded", "--", ".venv/bin/python", "-m", "demo.runner"]
# From a clean var dir: initdb, migrate, collectstatic, seed, then three servers.
START_S = 100
ONCESHOP_OWN = {
    "DATABASE_URL",
    "REDIS_URL",
    "SHOP_BASE_URL",
    "PROVIDER_BASE_URL",
    "DJANGO_SETTINGS_MODULE",
}
STOP_S = 40


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/pid/stat), None if it is gone or a
    zombie. With the pid it identifies a process even if the number is reused."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None if fields[0] == "Z" else fields[19]


def descendants(root: int) -> dict[int, str]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return {pid: started for pid in found if (started := start_time(pid)) is not None}


def pid_in(path: Path) -> int:
    return int(path.read_text().split()[0])


def wait_for(check, seconds: float, what: str, demo: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if demo.poll() is not None:
            pytest.fail(
                f"make demo exited with {demo.returncode} before {what}:\n{log.read_text()[-3000:]}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {seconds} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def home_answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.slow
@pytest.mark.timeout(START_S + STOP_S + 60)
def test_make_demo_starts_from_clean_restarts_its_worker_and_stops_everything(tmp_path):
    var = tmp_path / "var"
    port = free_port()
    env = {
        name: value
        for name, value in os.environ.items()
        # Unset: the demo must start its own embedded PostgreSQL and Redis, and derive
        # its URLs from PORT.
        if name
        not in {
            "DATABASE_URL",
            "REDIS_URL",
            "SHOP_BASE_URL",
            "PROVIDER_BASE_URL",
            "DJANGO_SETTINGS_MODULE",
        }
    }
    env |= {"ONCESHOP_VAR_DIR": str(var), "PORT": str(port)}
    log = tmp_path / "demo.log"
    with log.open("wb") as output:
        # Its own session, so the SIGINT below reaches it the way Ctrl-C reaches the
        # foreground process group of a terminal.
        demo = subprocess.Popen(
            DEMO, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        # Given the demo, started from nothing
        wait_for(lambda: home_answers(f"http://127.0.0.1:{port}/"), START_S, "home page", demo, log)
        pidfile = var / "worker.pid"
        worker = pid_in(pidfile)
        # The commands beside it find it by its PORT (demo/beside.py)
        published = var / "demos" / f"{port}.json"
        assert json.loads(published.read_text())["env"]["PAYMENT_PROVIDER"] == "sandbox"
        seen = descendants(demo.pid)
        servers = {
            pid_in(var / "pg" / "postmaster.pid"): "postgres",
            pid_in(var / "redis" / "redis.pid"): "redis",
        }
        assert worker in seen
        assert all(start_time(pid) for pid in servers)

        # When the worker is killed (as the chaos panel does), the supervisor restarts it
        os.killpg(worker, signal.SIGKILL)
        wait_for(
            lambda: pidfile.exists() and pid_in(pidfile) != worker and start_time(pid_in(pidfile)),
            START_S,
            "restarted worker",
            demo,
            log,
        )
        seen |= descendants(demo.pid)

        # And when Ctrl-C comes
        os.killpg(demo.pid, signal.SIGINT)
        assert demo.wait(timeout=STOP_S) == 0, log.read_text()[-3000:]
    finally:
        if demo.poll() is None:  # only if the test failed half-way: leave nothing behind
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()

    # Then nothing it started is left: children, grandchildren, PostgreSQL and Redis
    left = {pid: started for pid, started in seen.items() if start_time(pid) == started}
    assert left == {}, f"still running: {left}"
    deadline = time.monotonic() + 10  # the servers shut down asynchronously after their stop
    while any(start_time(pid) for pid in servers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [name for pid, name in servers.items() if start_time(pid)] == []
    assert not pidfile.exists()
    assert not published.exists()
    assert "worker died (signal SIGKILL); restarting" in log.read_text()
    # Nothing a person running the demo cannot act on: no warnings at all.
    warned = [line for line in log.read_text().splitlines() if "warning" in line.lower()]
    assert warned == []
