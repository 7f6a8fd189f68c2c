"""What a killed `make cluster` left running, found and stopped by the next run.

Ctrl-C stops everything the runner started. A runner killed outright (SIGKILL,
a closed terminal) cannot: its engines and nodes, each the leader of a session
of its own, go on running, holding their ports and the data directories. So
the runner keeps ``run.json`` up to date: its own pid, and the pid of each
process it started, each with its start time (a pid alone may name another
process by now). The next run, and `make clean`, stop what is still there:
``stop_leftovers``. A PostgreSQL or PgBouncer that a run started before it
could write the file is found by its own pid file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

from demo.beside import start_time

RUN_FILE = "run.json"
# Each leftover gets its stop signal, then this long, then SIGKILL (its whole group).
STOP_GRACE_S = 20.0


class AlreadyRunning(Exception):
    """The run that wrote run.json is alive: a cluster is running from this directory."""


def record(cluster_dir: Path, processes: list[tuple[str, int | None, signal.Signals]]) -> None:
    """Write run.json: this runner, and (name, pid, stop signal) of what it started."""
    state = {
        "runner": {"pid": os.getpid(), "started": start_time(os.getpid())},
        "processes": [
            {"name": name, "pid": pid, "started": started, "signal": stop.name}
            for name, pid, stop in processes
            # One that has exited already is not recorded: its number is free for others.
            if pid is not None and (started := start_time(pid))
        ],
    }
    path = cluster_dir / RUN_FILE
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(state, indent=2) + "\n")
    partial.replace(path)


def forget(cluster_dir: Path) -> None:
    """The run stopped everything itself: nothing is left over."""
    (cluster_dir / RUN_FILE).unlink(missing_ok=True)


def runner_alive(cluster_dir: Path) -> int | None:
    """The pid of the runner that wrote run.json, if it is still running; else None."""
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
        runner = json.loads((cluster_dir / RUN_FILE).read_text())["runner"]
        if runner["pid"] != os.getpid() and start_time(runner["pid"]) == runner["started"]:
            return int(runner["pid"])
    return None


def _recorded(cluster_dir: Path) -> list[tuple[str, int, signal.Signals]]:
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
        state = json.loads((cluster_dir / RUN_FILE).read_text())
        return [
            (entry["name"], entry["pid"], signal.Signals[entry["signal"]])
            for entry in reversed(state["processes"])  # the reverse of the start order
            if entry["started"] and start_time(entry["pid"]) == entry["started"]
        ]
    return []


def _by_pid_file(cluster_dir: Path) -> list[tuple[str, int, signal.Signals]]:
    found = []
    for name, pidfile, program, stop in [
        ("pgbouncer", cluster_dir / "pgbouncer" / "pgbouncer.pid", b"pgbouncer", signal.SIGINT),
        ("replica", cluster_dir / "pg" / "replica" / "postmaster.pid", b"postgres", signal.SIGINT),
        ("primary", cluster_dir / "pg" / "primary" / "postmaster.pid", b"postgres", signal.SIGINT),
    ]:
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(pidfile.read_text().split()[0])
            # A stale file's number may belong to anything by now: only that server.
            if program in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append((name, pid, stop))
    return found


def stop_leftovers(cluster_dir: Path) -> list[str]:
    """Stop what an earlier, killed run left running; the names of what was stopped.

    Raises AlreadyRunning while that run's runner is alive: it is not left over.
    """
    alive = runner_alive(cluster_dir)
    if alive is not None:
        raise AlreadyRunning(f"make cluster is running from {cluster_dir} (pid {alive})")
    leftovers = _recorded(cluster_dir)
    recorded = {pid for _, pid, _ in leftovers}
    leftovers += [entry for entry in _by_pid_file(cluster_dir) if entry[1] not in recorded]
    for _name, pid, stop in leftovers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # The whole group where it leads one (a gunicorn and its workers).
            if os.getpgid(pid) == pid:
                os.killpg(pid, stop)
            else:
                os.kill(pid, stop)
    deadline = time.monotonic() + STOP_GRACE_S
    while any(start_time(pid) for _, pid, _ in leftovers) and time.monotonic() < deadline:
        time.sleep(0.1)  # not our children: their exit can only be watched for
    for _name, pid, _ in leftovers:
        if start_time(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    forget(cluster_dir)
    return [name for name, _, _ in leftovers]
