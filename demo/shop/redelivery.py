"""The chaos panel's redelivery demo: a task you can kill mid-run and watch run again.

Killing the whole worker shows redelivery only after Redis's visibility timeout
(an hour here): the broker cannot tell a dead worker from a slow one. Killing
the one pool process that runs a task shows it within seconds, on the same
real worker and queue: the worker's main process sees its child die, and with
``acks_late`` + ``task_reject_on_worker_lost`` it hands the unacknowledged
message back to the queue, where the next free process takes it.

The task only records its attempts (in Redis, per run), so running it twice is
harmless, like every task here.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.utils import timezone
from django.utils.translation import gettext
from kombu.exceptions import OperationalError

from demo.shop.errors import ChaosUnavailable, RedeliveryUnavailable
from edge.redis import REDIS_DOWN, redis_client
from observability.metrics.instruments import observe_redis_unavailable

# Long enough to click "kill" while it runs, short enough to watch it finish.
DEMO_TASK_S = 12.0
# A run's attempts are kept this long: the panel shows recent runs only.
RUN_TTL_S = 3600


def redelivery_what_should_happen() -> str:
    return gettext(
        "The task works for %(seconds)s s. Kill the process running it: within seconds "
        "the worker puts the unacknowledged message back on the queue (acks_late, "
        "task_reject_on_worker_lost), another process starts it again (attempt 2, another "
        "pid), and it finishes once."
    ) % {"seconds": f"{DEMO_TASK_S:g}"}


@dataclass(frozen=True)
class Attempt:
    pid: int
    started: str
    finished: str | None


def _name(run_id: str) -> str:
    return f"demo-redelivery:{run_id}"


def redelivery_attempt_start(*, run_id: str) -> int:
    """Record that this process starts the run; returns the attempt's index."""
    entry = {"pid": os.getpid(), "started": timezone.now().isoformat(), "finished": None}
    client = redis_client()
    index = int(client.rpush(_name(run_id), json.dumps(entry))) - 1
    client.expire(_name(run_id), RUN_TTL_S)
    return index


def redelivery_attempt_finish(*, run_id: str, index: int) -> None:
    attempts = redelivery_attempts(run_id=run_id)
    done = {**attempts[index].__dict__, "finished": timezone.now().isoformat()}
    redis_client().lset(_name(run_id), index, json.dumps(done))


# Redis down, or the broker (the same Redis) refusing the demo task's message.
_DOWN: tuple[type[Exception], ...] = (*REDIS_DOWN, OperationalError)


@contextmanager
def _redis_needed() -> Iterator[None]:
    """Redis down (or the broker, the same Redis) is the panel's 503, never a 500."""
    try:
        yield
    except _DOWN as error:
        observe_redis_unavailable(use="redelivery")
        raise RedeliveryUnavailable() from error


def redelivery_attempts(*, run_id: str) -> list[Attempt]:
    with _redis_needed():
        raw = redis_client().lrange(_name(run_id), 0, -1)
    return [Attempt(**json.loads(item)) for item in raw]


def chaos_redelivery_start() -> str:
    from demo.shop.tasks import demo_redelivery  # tasks import this module

    run_id = uuid.uuid4().hex
    with _redis_needed():
        demo_redelivery.delay(run_id)
    return run_id


def chaos_redelivery_kill(*, run_id: str) -> int:
    """SIGKILL the pool process running the run's current attempt; return its pid."""
    running = [a for a in redelivery_attempts(run_id=run_id) if a.finished is None]
    if not running:
        raise ChaosUnavailable(
            gettext("No attempt of this task is running now: nothing was killed.")
        )
    pid = running[-1].pid
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError) as error:
        raise ChaosUnavailable(
            gettext("pid %(pid)s has already gone: nothing was killed.") % {"pid": pid}
        ) from error
    if b"celery" not in argv:  # a reused pid is never killed
        raise ChaosUnavailable(
            gettext("pid %(pid)s is not a Celery process (any more): not killed.") % {"pid": pid}
        )
    os.kill(pid, signal.SIGKILL)
    return pid
