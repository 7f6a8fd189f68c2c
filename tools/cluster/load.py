"""Requests per second through a running `make cluster`, with 1..N web nodes in rotation.

``python -m tools.cluster.load`` (docs/scaling.md gives its figures). For each
node count it takes the other nodes out of HAProxy's rotation (its runtime API),
then for ``--seconds`` runs ``--clients`` threads, each creating orders with
fresh Idempotency-Keys (the full write path: key record, stock, order, replay
record) through the load balancer, and reports answers per second, their
status codes, and the CPU each process family used meanwhile (from /proc), so
the share PostgreSQL takes is visible. The load generator runs on the same
machine and its CPU is reported too.

The cluster must run with the per-user caps off (see docs/scaling.md):
``MAX_OPEN_ORDERS_PER_USER=0 MAX_KEYS_PER_USER_PER_HOUR=0 API_THROTTLE_RATE=``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import requests

from demo.cluster.runner import CLUSTER_DIR, STATE_FILE

TICKS = os.sysconf("SC_CLK_TCK")


def _haproxy(command: str) -> str:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(CLUSTER_DIR / "haproxy" / "haproxy.sock"))
        conn.sendall(command.encode() + b"\n")
        return conn.recv(65536).decode()


def _processes() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command line, CPU seconds used so far)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        seconds = (int(fields[11]) + int(fields[12])) / TICKS
        found[int(entry.name)] = (int(fields[1]), cmdline, seconds)
    return found


def _cpu_by_family(runner: int) -> dict[str, float]:
    """CPU seconds used so far by each kind of the cluster's processes.

    The cluster's are the runner's descendants; the machine is shared, and what
    everything else used is one line of its own.
    """
    processes = _processes()
    totals: dict[str, float] = {}
    for pid, (_, cmdline, seconds) in processes.items():
        if pid == os.getpid():
            family = "load generator"
        elif _descends(pid, runner, processes):
            family = _family(cmdline)
        else:
            family = "the rest of the machine"
        totals[family] = totals.get(family, 0.0) + seconds
    return totals


def _descends(pid: int, ancestor: int, processes: dict[int, tuple[int, str, float]]) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = processes.get(pid, (0, "", 0.0))[0]
    return False


def _family(cmdline: str) -> str:
    for needle, name in (
        ("postgres", "postgresql (primary + replica)"),
        ("pgbouncer", "pgbouncer"),
        ("haproxy", "haproxy"),
        ("gunicorn", "gunicorn web nodes (+ provider)"),
        ("celery", "celery workers and beats"),
    ):
        if needle in cmdline:
            return name
    return "runner"


def _runner() -> int:
    for pid, (_, cmdline, _) in _processes().items():
        if "-m demo.cluster" in cmdline and pid != os.getpid():
            return pid
    raise SystemExit("no `make cluster` is running")


def _token(base: str, username: str, password: str) -> str:
    answer = requests.post(
        f"{base}/api/v1/auth/token/", json={"username": username, "password": password}, timeout=10
    )
    answer.raise_for_status()
    return str(answer.json()["token"])


def _product(base: str, staff: str) -> str:
    sku = f"LOAD-{uuid.uuid4().hex[:8]}"
    answer = requests.post(
        f"{base}/api/v1/products/",
        json={"sku": sku, "name": "Load", "price": 100, "currency": "CNY", "stock": 10**9},
        headers={"Authorization": f"Token {staff}"},
        timeout=10,
    )
    answer.raise_for_status()
    return sku


def run(base: str, tokens: list[str], sku: str, clients: int, seconds: float) -> Counter[int]:
    statuses: Counter[int] = Counter()
    samples: dict[int, str] = {}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(index: int) -> None:
        session = requests.Session()
        headers = {"Authorization": f"Token {tokens[index % len(tokens)]}"}
        body = {"lines": [{"sku": sku, "quantity": 1}]}
        while time.monotonic() < stop_at:
            key = {"Idempotency-Key": uuid.uuid4().hex}
            try:
                answer = session.post(
                    f"{base}/api/v1/orders/", json=body, headers={**headers, **key}, timeout=30
                )
                code, text = answer.status_code, answer.text[:200]
            except requests.RequestException as error:
                code, text = 0, str(error)[:200]
            with lock:
                statuses[code] += 1
                if code != 201 and code not in samples:
                    samples[code] = text

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for code, text in samples.items():
        print(f"  (first {code}: {text})")
    return statuses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=24)
    args = parser.parse_args()
    state = json.loads(STATE_FILE.read_text())
    base = state["url"]
    names = [node["name"] for node in state["nodes"]]
    staff = _token(base, "staff", "staff-runs-the-shop")
    tokens = [
        _token(base, user, password)
        for user, password in (("alice", "alice-pays-once"), ("bob", "bob-pays-once"))
    ]
    sku = _product(base, staff)
    runner = _runner()
    for count in range(1, len(names) + 1):
        for index, name in enumerate(names):
            verb = "enable" if index < count else "disable"
            _haproxy(f"{verb} server nodes/{name}")
        time.sleep(2)  # the health checks settle (1 s apart)
        before = _cpu_by_family(runner)
        started = time.monotonic()
        statuses = run(base, tokens, sku, args.clients, args.seconds)
        elapsed = time.monotonic() - started
        after = _cpu_by_family(runner)
        done = sum(n for code, n in statuses.items() if code == 201)
        print(f"\n{count} web node(s): {done / elapsed:.1f} orders/s created "
              f"({dict(statuses)} in {elapsed:.1f} s, {args.clients} clients)")  # fmt: skip
        used = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in after}
        total = sum(max(0.0, value) for value in used.values())
        for name, value in sorted(used.items(), key=lambda item: -item[1]):
            if value > 0.05:
                print(f"  {name:28} {value / elapsed:5.2f} cores  {100 * value / total:5.1f} %")
    for name in names:
        _haproxy(f"enable server nodes/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
