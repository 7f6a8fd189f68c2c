"""How long a task of a kill -9'd worker takes to run again, on Redis and on RabbitMQ.

``python -m tools.cluster.redelivery`` (docs/scaling.md gives its figures). Each case
runs a probe task that records when it starts, then sleeps; while it runs, the
worker is killed with SIGKILL, and a second worker, already connected and idle,
picks the message up. The figure is the time from the kill to the probe's
second start. Two kills per broker:

- ``pool``: only the pool process running the task. The worker's main process
  sees it die and, since ``task_reject_on_worker_lost``, rejects the message
  with requeue: both brokers hand it out again at once.
- ``node``: the whole worker (main process and pool), as a machine's loss does.
  Nobody is left to reject it. RabbitMQ requeues it when the connection drops;
  Redis only when the message's ``visibility_timeout`` has passed.

The probe app takes every Celery setting from the project (acks_late,
task_reject_on_worker_lost, prefetch 1, the transport options); only the queue is
its own, so it never meets the shop's tasks.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid

import django
import redis
from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DEMO_MODE", "true")
django.setup()

from django.conf import settings  # noqa: E402

QUEUE = os.environ.get("PROBE_QUEUE", "onceshop-redelivery-probe")
app = Celery("redelivery-probe")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_default_queue = QUEUE
# The probe outlives the kill by far: the second start is the redelivery, never a
# first run that finished.
PROBE_SLEEP_S = 600
WORKER_READY_TIMEOUT_S = 240.0


@app.task(name="redelivery.probe")
def probe(marker: str) -> None:
    redis.Redis.from_url(settings.REDIS_URL).rpush(
        f"probe:{marker}", f"{time.time()}:{os.getpid()}"
    )
    time.sleep(PROBE_SLEEP_S)


def _worker(env: dict[str, str], name: str, queue: str) -> subprocess.Popen[bytes]:
    argv = [
        os.path.join(os.path.dirname(sys.executable), "celery"),
        "-A",
        "tools.cluster.redelivery:app",
        "worker",
        "-Q",
        queue,
        "--concurrency",
        "1",
        "-n",
        f"{name}@%h",
        "--without-mingle",
        "--without-gossip",
        "--loglevel",
        "WARNING",
    ]
    return subprocess.Popen(
        argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _wait(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)  # polling a Redis list: nothing to subscribe to


def _pool_pids(leader: int) -> list[int]:
    children = f"/proc/{leader}/task/{leader}/children"
    with open(children) as listing:
        return [int(pid) for pid in listing.read().split()]


def measure(kill: str) -> float:
    """One kill on this process's broker (CELERY_BROKER_URL): seconds until the rerun."""
    marker = uuid.uuid4().hex
    store = redis.Redis.from_url(settings.REDIS_URL)
    env = dict(os.environ)
    # A queue of its own: what an earlier case left unacknowledged never meets it.
    queue = f"{QUEUE}-{marker[:12]}"
    first = _worker(env, f"probe-a-{marker[:6]}", queue)
    second: subprocess.Popen[bytes] | None = None
    try:
        probe.apply_async(args=(marker,), queue=queue)
        _wait(lambda: store.llen(f"probe:{marker}") >= 1, WORKER_READY_TIMEOUT_S, "first start")
        second = _worker(env, f"probe-b-{marker[:6]}", queue)
        time.sleep(8)  # the idle worker connects and starts consuming (no ready signal)
        if kill == "pool":
            for pid in _pool_pids(first.pid):
                os.kill(pid, signal.SIGKILL)
        else:
            os.killpg(first.pid, signal.SIGKILL)
        killed_at = time.time()
        timeout = settings.CELERY_VISIBILITY_TIMEOUT_S + 300
        _wait(lambda: store.llen(f"probe:{marker}") >= 2, timeout, "second start")
        entry = store.lindex(f"probe:{marker}", 1)
        assert isinstance(entry, bytes)
        second_start = float(entry.decode().split(":")[0])
        return second_start - killed_at
    finally:
        store.set(f"probe-over:{marker}", 1, ex=24 * 3600)
        for worker in (first, second):
            if worker is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
        store.delete(f"probe:{marker}")
        with app.connection_for_write() as connection:
            app.amqp.queues[queue].bind(connection.default_channel).delete()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default=settings.REDIS_URL)
    parser.add_argument("--amqp", default="amqp://guest:guest@127.0.0.1:5672//")
    parser.add_argument(
        "--visibility-timeout",
        type=int,
        default=30,
        help="Redis only; the shop's default is 3600 s",
    )
    parser.add_argument(
        "--here", action="store_true", help="measure on this process's CELERY_BROKER_URL only"
    )
    args = parser.parse_args()
    if args.here:
        name = "rabbitmq" if settings.BROKER_IS_AMQP else "redis"
        for kill in ("pool", "node"):
            seconds = measure(kill)
            print(f"{name:8} kill -9 {kill:4}: runs again after {seconds:6.1f} s", flush=True)
        return 0
    # One process per broker: the settings (queue type, transport options) follow
    # CELERY_BROKER_URL as the shop's own processes' do.
    for broker in (args.redis, args.amqp):
        env = {
            **os.environ,
            "CELERY_BROKER_URL": broker,
            "CELERY_VISIBILITY_TIMEOUT_S": str(args.visibility_timeout),
        }
        subprocess.run(
            [sys.executable, "-m", "tools.cluster.redelivery", "--here"], env=env, check=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
