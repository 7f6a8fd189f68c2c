"""`make cluster` after an earlier run, clean or killed, on another PORT; and a start
that fails.

Real PostgreSQL servers (demo/cluster/postgres.py, what the runner starts) in a
temporary directory: a pair built on two ports starts on two others the next
time, its replica streaming from the primary's new port; what a killed run left
running is stopped by the next; and the runner, when a start fails, stops what it
started and says what failed in one line.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from demo.beside import start_time
from demo.cluster.postgres import Pair, start_pair
from tests.cluster.conftest import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def _free_block(size: int = 40) -> int:
    # The runner's ports span PORT .. PORT+31 (demo/cluster/runner.py): all free.
    for _ in range(50):
        port = free_port()
        if port + size >= 65535:
            continue
        probes = []
        try:
            for offset in range(size):
                probe = socket.socket()
                probes.append(probe)
                probe.bind(("127.0.0.1", port + offset))
            return port
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise RuntimeError("no block of free ports")


def _streams(pair: Pair) -> None:
    """A row written on the primary reaches the replica."""
    pair.primary.sql("CREATE TABLE IF NOT EXISTS seen (n int)")
    pair.primary.sql("INSERT INTO seen VALUES (1)")
    pair.wait_caught_up()
    assert pair.replica.sql("SELECT count(*) FROM seen")[0][0] >= 1


def _postgres_of(root: Path) -> list[int]:
    """Every PostgreSQL process whose command line names a data directory under ``root``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            ours = argv[0].endswith(b"postgres") and str(root).encode() in b" ".join(argv)
            if ours and start_time(int(entry.name)):
                found.append(int(entry.name))
    return found


def test_the_pair_starts_on_the_ports_it_is_given_after_a_run_on_others(tmp_path):
    root = tmp_path / "pg"
    first = start_pair(root, primary_port=free_port(), replica_port=free_port(), durable=False)
    _streams(first)
    first.stop()

    ports = free_port(), free_port()
    again = start_pair(root, primary_port=ports[0], replica_port=ports[1], durable=False)
    try:
        assert again.primary.sql("SHOW port") == [(str(ports[0]),)]
        assert again.replica.sql("SHOW port") == [(str(ports[1]),)]
        # The replica follows the primary to its new port: it streams from there.
        _streams(again)
        assert again.replica.sql("SELECT status FROM pg_stat_wal_receiver") == [("streaming",)]
    finally:
        again.stop()
    assert _postgres_of(root) == []


# A run killed by SIGKILL: its runner goes, the servers it started (own sessions) stay.
KILLED_RUN = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from demo.cluster.leftovers import record
    from demo.cluster.postgres import start_pair

    cluster = Path(sys.argv[1])
    pair = start_pair(cluster / "pg", primary_port=int(sys.argv[2]),
                      replica_port=int(sys.argv[3]), durable=False)
    record(cluster, [("primary", pair.primary.pid, signal.SIGINT),
                     ("replica", pair.replica.pid, signal.SIGINT)])
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_what_a_killed_run_left_running_is_stopped_and_the_next_starts_on_other_ports(tmp_path):
    from demo.cluster.leftovers import stop_leftovers

    cluster = tmp_path / "cluster"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, str(cluster), str(free_port()), str(free_port())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = _postgres_of(cluster)
    assert left  # the primary and the replica outlived their runner

    stopped = stop_leftovers(cluster)

    assert set(stopped) >= {"primary", "replica"}
    assert [pid for pid in left if start_time(pid)] == []
    ports = free_port(), free_port()
    again = start_pair(cluster / "pg", primary_port=ports[0], replica_port=ports[1], durable=False)
    try:
        _streams(again)
    finally:
        again.stop()


def test_a_start_that_fails_stops_what_it_started_and_says_what_failed_in_one_line(tmp_path):
    port = _free_block()
    # Something else holds the replica's port (PORT + 31): the primary starts, the
    # replica cannot.
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", port + 31))
    blocker.listen()
    env = {name: value for name, value in os.environ.items() if name != "DATABASE_URL"}
    env.update(PORT=str(port), ONCESHOP_VAR_DIR=str(tmp_path), DEMO_MODE="true")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "demo.cluster"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    finally:
        blocker.close()

    assert done.returncode != 0
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(said) == 1, said
    assert said[0].startswith("make cluster could not start: the replica"), said
    assert "Address already in use" in said[0]
    assert "Traceback" not in done.stderr
    deadline = time.monotonic() + 10  # a fast shutdown ends within a moment of its signal
    while _postgres_of(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _postgres_of(tmp_path) == []
