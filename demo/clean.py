"""`make clean`'s first step: nothing may run from .var/ when it goes.

Refuses (exit 1, one line) while a demo or a cluster runs from the state
directory: removing a running PostgreSQL's files under it would leave it
serving from deleted ones. Otherwise stops what killed runs left running (an
embedded PostgreSQL or Redis started by a demo that was SIGKILLed, a killed
cluster's engines and nodes), so `rm -rf .var` leaves nothing behind.

    python -m demo.clean && rm -rf .var
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from config.embedded import VAR_ROOT
from demo.beside import DEMOS_DIR, cluster_running, live, read, start_time
from demo.cluster.leftovers import AlreadyRunning, stop_leftovers

# A leftover server gets its stop signal, then this long, then SIGKILL.
STOP_GRACE_S = 20.0


def _running() -> list[str]:
    found = []
    for path in sorted(DEMOS_DIR.glob("*.json")):
        demo = read(path)
        if demo is not None and live(demo.get("pid"), demo.get("started")):
            found.append(f"a demo on PORT {path.stem} (pid {demo['pid']})")
    cluster = cluster_running()
    if cluster is not None:
        found.append(f"a cluster on PORT {cluster.get('PORT')}")
    return found


def _leftover_servers() -> list[tuple[int, signal.Signals]]:
    """Embedded servers a killed demo left running: (pid, the signal that stops it).

    PostgreSQL's postmaster.pid and Redis's pidfile, under every provider's dir,
    each checked to name a live process of that server (a stale file's number
    may belong to anything by now).
    """
    found = []
    for pidfile, server, stop in [
        *((p, b"postgres", signal.SIGINT) for p in VAR_ROOT.glob("**/pg/postmaster.pid")),
        *((p, b"redis", signal.SIGTERM) for p in VAR_ROOT.glob("**/redis/redis.pid")),
    ]:
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(pidfile.read_text().split()[0])
            if server in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append((pid, stop))
    return found


def main() -> int:
    busy = _running()
    try:
        if not busy:
            stop_leftovers(VAR_ROOT / "cluster")
    except AlreadyRunning as cluster:
        busy.append(str(cluster))
    if busy:
        print(f"Still running from {VAR_ROOT}: {', '.join(busy)}. Stop it first (Ctrl-C).")
        return 1
    servers = _leftover_servers()
    for pid, stop in servers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, stop)
    deadline = time.monotonic() + STOP_GRACE_S
    while any(start_time(pid) for pid, _ in servers) and time.monotonic() < deadline:
        time.sleep(0.1)  # not our children: their exit can only be watched for
    for pid, _ in servers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
