"""A real Celery worker (prefork, acks_late) consuming the tests' queue on the real Redis.

The `worker` fixture (module scope) lives in tests/conftest.py. Every test leaves each
running worker settled (tests/conftest.py, ``pytest_runtest_teardown``): the flush
that empties the database after a transactional test must not race a task."""

import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import redis
from django.conf import settings

from config.celery import app
from tests.processes import ROOT, child_database_url

WORKER_START_TIMEOUT_S = 60
# The tests' own queue on the real broker: nothing else publishes to it or reads it.
TEST_QUEUE = "onceshop-tests"
# Where kombu's Redis transport keeps the messages a worker took and has not acked.
UNACKED, UNACKED_INDEX = "unacked", "unacked_index"
# A remote-control reply on a loaded machine: asked again until the settle deadline.
CONTROL_TIMEOUT_S = 2.0
# A test's last task (a delivery with its 3 s connect timeout, a 12 s demo task) ends
# well within this, even at load 10.
SETTLE_TIMEOUT_S = 60
# The workers started and not yet stopped, each settled after every test.
RUNNING: list["Worker"] = []
_names = itertools.count()


class Worker:
    """The worker process, its log, and ways to wait on it or hurt it."""

    def __init__(self, process: subprocess.Popen[str], name: str) -> None:
        self.process = process
        self.name = name
        self.log: list[str] = []
        self.broker = redis.Redis.from_url(settings.REDIS_URL)
        # Tasks waiting for their countdown that settle() revoked: the worker holds
        # them (unacked) until their time comes, then drops them without running.
        self.revoked: set[str] = set()
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
        """Nothing queued and nothing taken but unacknowledged (acks_late), but what
        settle() revoked."""
        return self.broker.llen(TEST_QUEUE) == 0 and unacked_ids(self.broker) <= self.revoked

    def _ask(self, command: str) -> list[dict[str, Any]] | None:
        """The worker's answer to one inspect command; None if it did not answer in time."""
        inspect = app.control.inspect(destination=[self.name], timeout=CONTROL_TIMEOUT_S, limit=1)
        replies = getattr(inspect, command)()
        return None if not replies or self.name not in replies else replies[self.name]

    def _quiet(self) -> bool:
        """One look: idle, running nothing, and every countdown it holds revoked."""
        if self.broker.llen(TEST_QUEUE):
            return False
        # Each answer also comes after the worker's consumer handled whatever it had
        # taken off the queue before we asked: such a message is unacked by then, and
        # the idle() below sees it.
        active, reserved, scheduled = (self._ask(c) for c in ("active", "reserved", "scheduled"))
        if active is None or reserved is None or scheduled is None or active or reserved:
            return False
        waiting = {entry["request"]["id"] for entry in scheduled} - self.revoked
        if waiting:
            # A retry against a dead URL, a delayed late success: the test is over,
            # its rows are about to go. Revoked, the worker drops it when it is due.
            replies = app.control.revoke(
                sorted(waiting), destination=[self.name], reply=True, timeout=CONTROL_TIMEOUT_S
            )
            if replies:
                self.revoked |= waiting
            return False  # looked at again: one may have started before the revoke
        return self.idle()

    def settle(self, timeout: float = SETTLE_TIMEOUT_S) -> None:
        """Wait until nothing the worker holds can still write: seen quiet twice in a row
        (a task finishing just before the first look may have queued another)."""
        if self.process.poll() is not None:
            return  # killed by its test: nothing runs
        streak = 0

        def quiet_twice() -> bool:
            nonlocal streak
            streak = streak + 1 if self._quiet() else 0
            return streak >= 2

        self.wait_for(quiet_twice, timeout=timeout, what="the worker to settle")

    def pool_children(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children()


def unacked_ids(broker: redis.Redis) -> set[str]:
    """The task ids of the tests' queue taken by a worker and not acknowledged yet."""
    ids = set()
    for raw in broker.hvals(UNACKED):
        message, _exchange, routing_key = json.loads(raw)
        if routing_key == TEST_QUEUE:
            ids.add(message["headers"]["id"])
    return ids


def _forget_unacked(broker: redis.Redis) -> None:
    """Drop what a killed worker took and never acked: no later worker runs it."""
    for tag, raw in broker.hgetall(UNACKED).items():
        if json.loads(raw)[2] == TEST_QUEUE:
            broker.hdel(UNACKED, tag)
            broker.zrem(UNACKED_INDEX, tag)


def start_worker(
    extra_env: dict[str, str] | None = None, *, concurrency: int = 1
) -> Iterator[Worker]:
    """Start a worker on the test database; stop it (and empty its queue) afterwards.

    ``concurrency``: its pool processes (one by default: the tests' tasks run in turn)."""
    broker = redis.Redis.from_url(settings.REDIS_URL)
    broker.delete(TEST_QUEUE)  # no stale message from earlier tests reaches this worker
    _forget_unacked(broker)
    name = f"tests-{os.getpid()}-{next(_names)}@{socket.gethostname()}"
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
            str(concurrency),
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            "INFO",
            "--hostname",
            name,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    worker = Worker(process, name)
    RUNNING.append(worker)
    try:
        worker.wait_for(
            lambda: any("ready." in line for line in worker.log),
            timeout=WORKER_START_TIMEOUT_S,
            what="the worker to start",
        )
        yield worker
    finally:
        RUNNING.remove(worker)
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        broker.delete(TEST_QUEUE)
        _forget_unacked(broker)
