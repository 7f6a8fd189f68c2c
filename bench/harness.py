"""Drive an HTTP server with N keep-alive clients and measure what comes back.

The load generator is deliberately plain: one thread per client, each with one
persistent ``http.client.HTTPConnection`` (HTTP/1.1 keep-alive), sending the
next request as soon as the previous answer is read (a closed loop). No extra
dependency, and nothing between the client and gunicorn but loopback TCP.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from http.client import HTTPConnection, HTTPException

from bench import pgsessions
from bench.appserver import HOST, Server, tree_cpu_seconds
from bench.stats import Sample, Throughput, in_window, summarize

# Far above any healthy answer (milliseconds); a stuck request fails the sample
# instead of stalling the run.
REQUEST_TIMEOUT_S = 30.0
# After a request that got no answer (server gone, connection refused), wait this
# long before the next: a dead server must not turn the clients into a busy loop.
ERROR_PAUSE_S = 0.05


@dataclass(frozen=True)
class HttpRequest:
    """One request to send, and the response headers that make its 2xx the expected kind."""

    method: str
    path: str
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    expect_headers: Mapping[str, str] = field(default_factory=dict)


# (client index, request number of that client) -> the next request, or None: done.
RequestFactory = Callable[[int, int], HttpRequest | None]


@dataclass(frozen=True)
class Drive:
    """How long to drive and with how many clients."""

    clients: int
    warmup_s: float
    measure_s: float


class _Client(threading.Thread):
    """One closed-loop client with one keep-alive connection."""

    def __init__(
        self,
        *,
        port: int,
        index: int,
        factory: RequestFactory,
        deadline: float,
        stop: threading.Event,
    ) -> None:
        super().__init__(name=f"bench-client-{index}", daemon=True)
        self.port, self.index, self.factory = port, index, factory
        self.deadline, self.stop = deadline, stop
        self.samples: list[Sample] = []
        self.connects = 0

    def run(self) -> None:
        conn = HTTPConnection(HOST, self.port, timeout=REQUEST_TIMEOUT_S)
        try:
            number = 0
            while not self.stop.is_set() and time.monotonic() < self.deadline:
                request = self.factory(self.index, number)
                if request is None:
                    return
                number += 1
                self.samples.append(self._send(conn, request))
        finally:
            conn.close()

    def _send(self, conn: HTTPConnection, request: HttpRequest) -> Sample:
        if conn.sock is None:  # first request, or the server closed the connection
            self.connects += 1
        started = time.monotonic()
        try:
            conn.request(request.method, request.path, body=request.body, headers=request.headers)
            response = conn.getresponse()
            response.read()  # the whole body, or the connection cannot be reused
        except (OSError, HTTPException):
            conn.close()  # the next request opens a new connection
            finished = time.monotonic()
            self.stop.wait(ERROR_PAUSE_S)
            return Sample(finished_at=finished, latency_s=finished - started, status=0)
        finished = time.monotonic()
        expected = all(response.getheader(k) == v for k, v in request.expect_headers.items())
        return Sample(
            finished_at=finished,
            latency_s=finished - started,
            status=response.status,
            expected=expected,
        )


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
    cpu_started = time.process_time()
    started = time.monotonic()
    deadline = started + seconds
    threads = [
        _Client(port=port, index=i, factory=factory, deadline=deadline, stop=stop)
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
    return LoadRun(
        samples=[sample for thread in threads for sample in thread.samples],
        started_at=started,
        wall_s=wall,
        connects=sum(thread.connects for thread in threads),
        cpu_cores=(time.process_time() - cpu_started) / wall if wall else math.nan,
    )


def measure(
    *,
    name: str,
    label: str,
    server: Server,
    factory: RequestFactory,
    plan: Drive,
    database_url: str,
) -> Throughput:
    """Warm up, then measure: only answers read inside the measured window count.

    CPU shares (the server's and the load generator's) and the database sessions'
    states cover the whole run.
    """
    server_cpu = tree_cpu_seconds(server.pid)
    with pgsessions.watch(database_url) as sessions:
        run = drive(
            port=server.port,
            factory=factory,
            clients=plan.clients,
            seconds=plan.warmup_s + plan.measure_s,
        )
    server_cpu = tree_cpu_seconds(server.pid) - server_cpu
    window_start = run.started_at + plan.warmup_s
    window = in_window(run.samples, window_start, window_start + plan.measure_s)
    result = summarize(name=name, label=label, samples=window, seconds=plan.measure_s)
    return replace(
        result,
        connections=run.connects,
        client_cpu=run.cpu_cores,
        server_cpu=server_cpu / run.wall_s,
        pg_sessions=sessions.means(),
    )
