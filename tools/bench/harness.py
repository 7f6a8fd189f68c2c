"""Drive an HTTP server with N keep-alive clients and measure what comes back.

The load generator is deliberately plain: one thread per client, each with one
persistent ``http.client.HTTPConnection`` (HTTP/1.1 keep-alive), sending the
next request as soon as the previous answer is read (a closed loop). No extra
dependency, and nothing between the client and gunicorn but loopback TCP.

Meanwhile a thread samples what the bench database's sessions do every 50 ms:
under 16 clients the question is also whether requests queue in PostgreSQL. A
session is **running** a statement, in **lock wait** (blocked on a lock another
transaction holds: a hot row), **idle in transaction** (PostgreSQL waits for the
app's next statement while the app holds its locks and Python runs), or **idle**.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.client import HTTPConnection, HTTPException
from pathlib import Path

import psycopg

from tools.bench.appserver import HOST, Server, tree_cpu_seconds
from tools.bench.database import libpq_uri
from tools.bench.stats import Sample, Throughput, in_window, summarize

# Far above any healthy answer (milliseconds); a stuck request fails the sample
# instead of stalling the run.
REQUEST_TIMEOUT_S = 30.0
# After a request that got no answer (server gone, connection refused), wait this
# long before the next: a dead server must not turn the clients into a busy loop.
ERROR_PAUSE_S = 0.05
SESSIONS_INTERVAL_S = 0.05
STATES = ("running", "lock wait", "idle in transaction", "idle")


@dataclass(frozen=True)
class HttpRequest:
    """One request to send, and the response headers that make its 2xx the expected kind."""

    method: str
    path: str
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    expect_headers: Mapping[str, str] = field(default_factory=dict)


def keyed_post(path: str, body: bytes, *, token: str, key: str, replayed: bool) -> HttpRequest:
    """A POST with an Idempotency-Key, as the user whose token it is; its 2xx is the
    expected kind when it says whether it was replayed as ``replayed`` says."""
    return HttpRequest(
        method="POST",
        path=path,
        body=body,
        headers={
            "Authorization": f"Token {token}",
            "Content-Type": "application/json",
            "Idempotency-Key": key,
        },
        expect_headers={"Idempotent-Replayed": "true" if replayed else "false"},
    )


# (client index, request number of that client) -> the next request, or None: done.
RequestFactory = Callable[[int, int], HttpRequest | None]


@dataclass(frozen=True)
class Drive:
    """How long to drive and with how many clients."""

    clients: int
    warmup_s: float
    measure_s: float


@dataclass(frozen=True)
class LoadRun:
    samples: list[Sample]
    started_at: float
    wall_s: float
    connects: int
    cpu_cores: float  # this process's CPU time over the run's wall time


def drive(*, port: int, factory: RequestFactory, clients: int, seconds: float) -> LoadRun:
    """Run ``clients`` closed-loop clients for ``seconds`` (or until the factory is done)."""
    stop = threading.Event()
    samples: list[list[Sample]] = [[] for _ in range(clients)]
    connects = [0] * clients

    def client(index: int) -> None:
        conn = HTTPConnection(HOST, port, timeout=REQUEST_TIMEOUT_S)
        try:
            number = 0
            while not stop.is_set() and time.monotonic() < deadline:
                if (request := factory(index, number)) is None:
                    return
                number += 1
                if conn.sock is None:  # first request, or the server closed the connection
                    connects[index] += 1
                started = time.monotonic()
                try:
                    conn.request(request.method, request.path, request.body, request.headers)
                    response = conn.getresponse()
                    response.read()  # the whole body, or the connection cannot be reused
                except (OSError, HTTPException):
                    conn.close()  # the next request opens a new connection
                    finished = time.monotonic()
                    samples[index].append(Sample(finished, finished - started, status=0))
                    stop.wait(ERROR_PAUSE_S)
                    continue
                finished = time.monotonic()
                expected = all(
                    response.getheader(k) == v for k, v in request.expect_headers.items()
                )
                samples[index].append(
                    Sample(finished, finished - started, response.status, expected)
                )
        finally:
            conn.close()

    cpu_started, started = time.process_time(), time.monotonic()
    deadline = started + seconds
    threads = [
        threading.Thread(target=client, args=(i,), name=f"bench-client-{i}", daemon=True)
        for i in range(clients)
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            # A request already sent when the deadline passes may take up to its timeout.
            thread.join(timeout=max(0.0, deadline - time.monotonic()) + REQUEST_TIMEOUT_S + 5)
    finally:
        stop.set()  # Ctrl-C, or a client that did not finish: stop the others
    wall = time.monotonic() - started
    cpu = (time.process_time() - cpu_started) / wall if wall else math.nan
    return LoadRun([s for own in samples for s in own], started, wall, sum(connects), cpu)


def measure(
    *,
    name: str,
    label: str,
    server: Server,
    factory: RequestFactory,
    plan: Drive,
    database_url: str,
) -> Throughput:
    """Warm up, then measure: only answers read inside the measured window count. CPU
    shares (the server's and the load generator's) and sessions cover the whole run."""
    server_cpu = tree_cpu_seconds(server.pid)
    with watch_sessions(database_url) as sessions:
        seconds = plan.warmup_s + plan.measure_s
        run = drive(port=server.port, factory=factory, clients=plan.clients, seconds=seconds)
    server_cpu = tree_cpu_seconds(server.pid) - server_cpu
    window_start = run.started_at + plan.warmup_s
    window = in_window(run.samples, window_start, window_start + plan.measure_s)
    return replace(
        summarize(name=name, label=label, samples=window, seconds=plan.measure_s),
        connections=run.connects,
        client_cpu=run.cpu_cores,
        server_cpu=server_cpu / run.wall_s,
        pg_cpu=sessions.backend_cpu_seconds() / run.wall_s,
        pg_sessions=sessions.means(),
    )


def send(port: int, request: HttpRequest) -> tuple[int, bytes]:
    """One request on a connection of its own: the answer's status and body."""
    conn = HTTPConnection(HOST, port, timeout=REQUEST_TIMEOUT_S)
    try:
        conn.request(request.method, request.path, body=request.body, headers=request.headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def classify(state: str | None, wait_event_type: str | None) -> str:
    """One of STATES for a pg_stat_activity row."""
    if state == "active":
        return "lock wait" if wait_event_type == "Lock" else "running"
    if state in ("idle in transaction", "idle in transaction (aborted)"):
        return "idle in transaction"
    return "idle"


def mean_counts(snapshots: Iterable[Iterable[tuple[str | None, str | None]]]) -> dict[str, float]:
    """Mean number of sessions per state over the snapshots taken."""
    totals: Counter[str] = Counter()
    taken = 0
    for rows in snapshots:
        taken += 1
        totals.update(classify(state, wait) for state, wait in rows)
    return {state: totals[state] / taken if taken else 0.0 for state in STATES}


@dataclass
class Sessions:
    """Snapshots of the bench database's sessions (state, wait event type), and the CPU
    its backends used: the work PostgreSQL does for the server, which the server's own
    CPU cannot see (parsing, planning, index maintenance, WAL, the commit)."""

    snapshots: list[list[tuple[str | None, str | None]]] = field(default_factory=list)
    # backend pid -> (CPU seconds when first seen, when last seen). A backend first
    # seen after the start (a new connection) counts from zero: all its work is ours.
    backend_cpu: dict[int, tuple[float, float]] = field(default_factory=dict)

    def means(self) -> dict[str, float]:
        return mean_counts(self.snapshots)

    def note_backends(self, pids: Iterable[int], *, at_start: bool) -> None:
        for pid in pids:
            used = process_cpu_seconds(pid)
            if math.isnan(used):
                continue
            first, _ = self.backend_cpu.get(pid, (used if at_start else 0.0, used))
            self.backend_cpu[pid] = (first, used)

    def backend_cpu_seconds(self) -> float:
        if not self.backend_cpu:
            return math.nan
        return sum(last - first for first, last in self.backend_cpu.values())


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process, from /proc (NaN if it is gone or elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def watch_sessions(url: str) -> Iterator[Sessions]:
    """Sample the sessions every SESSIONS_INTERVAL_S while the block runs; read
    ``.means()`` afterwards."""
    sessions, stop = Sessions(), threading.Event()
    query = """SELECT state, wait_event_type, pid FROM pg_stat_activity WHERE datname =
        current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()"""
    started = threading.Event()

    def sample() -> None:
        with psycopg.connect(libpq_uri(url), autocommit=True) as conn:
            rows = conn.execute(query).fetchall()
            sessions.note_backends((pid for *_, pid in rows), at_start=True)
            started.set()
            while not stop.wait(SESSIONS_INTERVAL_S):
                rows = conn.execute(query).fetchall()
                sessions.snapshots.append([(state, wait) for state, wait, _ in rows])
                sessions.note_backends((pid for *_, pid in rows), at_start=False)

    sampler = threading.Thread(target=sample, name="bench-pg-sessions", daemon=True)
    sampler.start()
    started.wait(timeout=5)  # the backends' CPU at the start, before any load
    try:
        yield sessions
    finally:
        stop.set()
        sampler.join(timeout=5)
