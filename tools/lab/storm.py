"""A server with a fixed capacity, recovering from an outage, and clients retrying at it.

The server is deliberately simple and honest about capacity: ``workers``
threads take connections off the listen queue one at a time; while the outage
lasts they answer 503 at once, afterwards each request costs ``service_s`` of
work. Like most servers it cannot tell that a client has already given up: a
request that waited in the queue longer than its client's timeout is still
worked on, and its answer goes nowhere (wasted work).

The clients send the same request and follow the same rule about what to
retry (``onceshop_client``'s ``is_retryable``); they differ only in how long
they wait before retrying: not at all, or ``onceshop_client``'s schedule.

Everything runs in this process on loopback; the counts are the server's own
(requests received, work done) and the clients' (attempts, successes).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from onceshop_client import RetryPolicy, is_retryable

_RESPONSES = {
    200: b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    b"Content-Length: 2\r\nConnection: close\r\n\r\n{}",
    503: b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\n"
    b'Content-Length: 42\r\nConnection: close\r\n\r\n{"status": 503, "code": "unavailable"}   ',
}


@dataclass(frozen=True)
class StormConditions:
    clients: int = 80
    workers: int = 2
    service_s: float = 0.02  # capacity: workers / service_s = 100 requests a second
    outage_s: float = 1.0
    client_timeout_s: float = 0.25  # a client gives up on an answer after this
    limit_s: float = 6.0  # how long after the outage we wait for everyone to get through


@dataclass(frozen=True)
class StormResult:
    clients: int
    attempts: int  # requests the clients sent, all of them
    received: int  # requests the server read
    succeeded: int  # clients that got their 200
    wasted: int  # requests worked on whose answer nobody was waiting for any more
    recovered_s: float | None  # outage end -> last client through; None: not within the limit

    @property
    def amplification(self) -> float:
        return self.attempts / self.clients


class CapacityServer:
    def __init__(self, conditions: StormConditions) -> None:
        self.conditions = conditions
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
        self._listener.settimeout(0.05)  # so workers notice the end of the run
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.received = 0
        self.worked = 0
        self.recovers_at = 0.0
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.recovers_at = time.monotonic() + self.conditions.outage_s
        for _ in range(self.conditions.workers):
            thread = threading.Thread(target=self._work, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._listener.close()

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1.0)
                if not _read_request(conn):
                    continue
                with self._lock:
                    self.received += 1
                status = 503
                if time.monotonic() >= self.recovers_at:
                    time.sleep(self.conditions.service_s)  # the request's work (simulated)
                    with self._lock:
                        self.worked += 1
                    status = 200
                with contextlib.suppress(OSError):  # the client may be long gone
                    conn.sendall(_RESPONSES[status])


def _read_request(conn: socket.socket) -> bool:
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return False
            data += chunk
    except OSError:
        return False
    return True


# --- the clients: the same request, two schedules ---------------------------------------

REQUEST = b"POST /work HTTP/1.1\r\nHost: storm\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def attempt(address: tuple[str, int], timeout_s: float) -> int | None:
    """One request on a fresh connection: the answer's status, or None (no answer in time).

    Plain sockets rather than ``requests``: the clients share this process with the
    server, so they should cost it as little CPU as possible.
    """
    try:
        with socket.create_connection(address, timeout=timeout_s) as conn:
            conn.sendall(REQUEST)
            head = conn.recv(64)
    except OSError:
        return None  # refused, reset, or timed out: a retry is in order
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def immediately(_retry: int) -> float:
    """The naive schedule: no wait at all."""
    return 0.0


def backoff_policy(conditions: StormConditions) -> RetryPolicy:
    """onceshop_client's schedule: capped exponential backoff with full jitter."""
    return RetryPolicy(
        max_attempts=10_000,  # the time budget is what ends it here
        max_elapsed_s=conditions.outage_s + conditions.limit_s,
        base_s=0.1,
        cap_s=2.0,
    )


def run_client(
    address: tuple[str, int],
    conditions: StormConditions,
    wait: Callable[[int], float],
    stop: threading.Event,
) -> tuple[int, bool]:
    """Send until a 200 (or the end of the run); returns (attempts, succeeded).

    What is retried is the client's rule (``is_retryable``: no answer, or a 5xx);
    only the wait between attempts differs between the two kinds of client.
    """
    attempts = 0
    while not stop.is_set():
        status = attempt(address, conditions.client_timeout_s)
        attempts += 1
        if status == 200:
            return attempts, True
        if status is not None and not is_retryable(status=status, code=""):
            return attempts, False
        stop.wait(wait(attempts - 1))  # returns at once when the run ends
    return attempts, False


def storm(wait: Callable[[int], float], conditions: StormConditions) -> StormResult:
    """All clients start at the outage, together; measure until all got through or the limit."""
    server = CapacityServer(conditions)
    stop = threading.Event()
    barrier = threading.Barrier(conditions.clients + 1)
    done_at: list[float] = []
    totals = {"attempts": 0, "succeeded": 0}
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        attempts, succeeded = run_client(server.address, conditions, wait, stop)
        with lock:
            totals["attempts"] += attempts
            if succeeded:
                totals["succeeded"] += 1
                done_at.append(time.monotonic())

    threads = [threading.Thread(target=run, daemon=True) for _ in range(conditions.clients)]
    for thread in threads:
        thread.start()
    server.start()
    barrier.wait()
    deadline = server.recovers_at + conditions.limit_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stop.set()
    for thread in threads:
        thread.join()
    server.stop()
    everyone = totals["succeeded"] == conditions.clients
    return StormResult(
        clients=conditions.clients,
        attempts=totals["attempts"],
        received=server.received,
        succeeded=totals["succeeded"],
        wasted=server.worked - totals["succeeded"],
        recovered_s=max(done_at) - server.recovers_at if everyone and done_at else None,
    )
