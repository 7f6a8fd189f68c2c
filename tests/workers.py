"""A real Celery worker (prefork, acks_late) consuming the tests' queue on the real Redis.

The `worker` fixture (module scope) lives in tests/conftest.py."""

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import redis
from django.conf import settings

from tests.processes import ROOT, child_database_url

WORKER_START_TIMEOUT_S = 60
# The tests' own queue on the real broker: nothing else publishes to it or reads it.
TEST_QUEUE = "onceshop-tests"


class Worker:
    """The worker process, its log, and ways to wait on it or hurt it."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.log: list[str] = []
        self.broker = redis.Redis.from_url(settings.REDIS_URL)
        threading.Thread(target=self._read_log, daemon=True).start()

    def _read_log(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append(line.rstrip())

    def wait_for(
        self, condition: Callable[[], Any], timeout: float = 30, what: str = "condition"
    ) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if value := condition():
                return value
            time.sleep(0.05)
        raise AssertionError(
            f"timed out waiting for {what}; worker log tail:\n" + "\n".join(self.log[-30:])
        )

    def idle(self) -> bool:
        """Nothing queued and nothing taken but unacknowledged (acks_late)."""
        return self.broker.llen(TEST_QUEUE) == 0 and self.broker.hlen("unacked") == 0

    def pool_children(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children()


def start_worker(extra_env: dict[str, str] | None = None) -> Iterator[Worker]:
    """Start a worker on the test database; stop it (and empty its queue) afterwards."""
    broker = redis.Redis.from_url(settings.REDIS_URL)
    broker.delete(TEST_QUEUE)  # no stale message from earlier tests reaches this worker
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "CELERY_QUEUE": TEST_QUEUE,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        **(extra_env or {}),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config.celery:app",
            "worker",
            "--queues",
            TEST_QUEUE,
            "--pool",
            "prefork",
            "--concurrency",
            "1",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            "INFO",
            "--hostname",
            f"tests-{os.getpid()}@%h",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    worker = Worker(process)
    try:
        worker.wait_for(
            lambda: any("ready." in line for line in worker.log),
            timeout=WORKER_START_TIMEOUT_S,
            what="the worker to start",
        )
        yield worker
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        broker.delete(TEST_QUEUE)
