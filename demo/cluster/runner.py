"""`make cluster`: start every engine and node, write state.json, supervise until Ctrl-C.

The order of the start matters: PostgreSQL (primary, then its replica), PgBouncer
in front of both, the schema and the demo's data (migrated on the primary
directly), then the provider, the web nodes, HAProxy in front of them, and the
workers and beats. Anything that dies is started again after a backoff, as an
orchestrator would, and state.json is rewritten with its new pids; Ctrl-C (or
SIGTERM) stops everything, in the reverse order.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from demo.cluster import preflight
from demo.cluster.haproxy import HAProxy
from demo.cluster.leftovers import AlreadyRunning, forget, record, stop_leftovers
from demo.cluster.pgbouncer import PgBouncer, Target
from demo.cluster.postgres import Pair, start_pair
from demo.runner import QUIET_WORKER, Child, _gunicorn, _stop

BASE_DIR = Path(__file__).resolve().parent.parent.parent
CLUSTER_DIR = Path(os.environ.get("ONCESHOP_VAR_DIR", BASE_DIR / ".var")) / "cluster"
STATE_FILE = CLUSTER_DIR / "state.json"
DATABASE = "onceshop"
# The ports, from PORT (the load balancer's): the provider next to it, as in
# `make demo`; the rest in blocks of ten above it.
NODE_PORT_OFFSET = 10
PGBOUNCER_PORT_OFFSET = 20
PRIMARY_PORT_OFFSET = 30
REPLICA_PORT_OFFSET = 31
# The lock timeout PgBouncer's connect_query gives every server connection: the
# product's own default (DATABASE_LOCK_TIMEOUT_MS), which a direct connection sends.
LOCK_TIMEOUT_MS = int(os.environ.get("DATABASE_LOCK_TIMEOUT_MS", "5000"))
# Workers and beats run on this many nodes (the first ones): two, so that a whole
# node's loss leaves one of each, and so that two beats prove the single-runner lock.
BACKGROUND_NODES = 2
# A process that died is started again after this long, doubling to the cap while it
# keeps dying within STABLE_AFTER_S.
RESTART_FIRST_S = 1.0
RESTART_CAP_S = 30.0
STABLE_AFTER_S = 60.0
# How often state.json is brought up to date with the processes' pids.
STATE_EVERY_S = 1.0
# Every web server answers /healthz within this long of its start, even on a busy
# machine (a gunicorn boots in a few seconds; eight Django processes booting at once
# beside another load take minutes, so the chaos run, which waits longer, says so).
READY_TIMEOUT_S = float(os.environ.get("CLUSTER_READY_TIMEOUT_S", "120"))


@dataclass
class Engine:
    """A database server, the pooler or the load balancer, supervised like a child."""

    name: str
    start: Callable[[], None]
    stop: Callable[[], None]
    process: Callable[[], subprocess.Popen[bytes] | None]

    @property
    def alive(self) -> bool:
        process = self.process()
        return process is not None and process.poll() is None


@dataclass
class Restarts:
    backoff_s: float = RESTART_FIRST_S
    at: float | None = None
    started_at: float = field(default_factory=time.monotonic)


@dataclass
class Node:
    name: str
    port: int
    children: list[Child]


def group_pids(leader: int | None) -> list[int]:
    """The leader and every process in its process group (gunicorn's and Celery's forks)."""
    if leader is None:
        return []
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            # Field 5 of /proc/PID/stat is the process group; the name before it is
            # in parentheses and may hold spaces, so split after the last ")".
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) == leader:
                pids.append(int(entry.name))
    return sorted(pids) or [leader]


def _cluster_env(port: int, bouncer: PgBouncer, broker: str, redis_url: str) -> dict[str, str]:
    return {
        "DEMO_MODE": "true",
        "DATABASE_URL": bouncer.url(DATABASE),
        "DATABASE_REPLICA_URL": bouncer.url(f"{DATABASE}_replica"),
        "DATABASE_TRANSACTION_POOLING": "true",
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": broker,
        # The machine's RabbitMQ may serve others: a queue of this cluster's own.
        "CELERY_QUEUE": f"onceshop-cluster-{port}",
        "PORT": str(port),
        "PROVIDER_PORT": str(port + 1),
        # HAProxy appends the client's address to X-Forwarded-For.
        "TRUSTED_PROXY_COUNT": "1",
        "LOG_FORMAT": os.environ.get("LOG_FORMAT", "plain"),
    }


def _metrics(name: str) -> dict[str, str]:
    return {"PROMETHEUS_MULTIPROC_DIR": str(CLUSTER_DIR / "metrics" / name)}


def _celery(bin_dir: str, *args: str) -> list[str]:
    return [os.path.join(bin_dir, "celery"), "-A", "config.celery:app", *args]


def _nodes(count: int, port: int, bin_dir: str) -> list[Node]:
    nodes = []
    for index in range(1, count + 1):
        name = f"node-{index}"
        node_port = port + NODE_PORT_OFFSET + index
        children = [
            Child(f"{name}-web", _gunicorn(bin_dir, str(node_port)), env=_metrics(f"{name}-web"))
        ]
        if index <= BACKGROUND_NODES:
            node_dir = CLUSTER_DIR / name
            node_dir.mkdir(parents=True, exist_ok=True)
            worker = _celery(
                bin_dir, "worker", "--loglevel", "INFO", "--concurrency", "2", "-n", f"{name}@%h"
            )
            schedule = str(node_dir / "celerybeat-schedule")
            beat = _celery(bin_dir, "beat", "--loglevel", "INFO", "--schedule", schedule)
            children += [
                # Every worker also runs the provider's tasks (its notifications), as
                # `make demo`'s one worker does: any surviving node delivers them.
                Child(
                    f"{name}-worker",
                    worker,
                    provider=True,
                    env={**QUIET_WORKER, **_metrics(f"{name}-worker")},
                ),
                Child(f"{name}-beat", beat),
            ]
        nodes.append(Node(name, node_port, children))
    return nodes


def _ensure_database(pair: Pair) -> None:
    if not pair.primary.sql("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)):
        pair.primary.sql(f'CREATE DATABASE "{DATABASE}"')


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], check=True, env=env, cwd=BASE_DIR)


def write_state(
    *,
    url: str,
    nodes: list[Node],
    pair: Pair,
    bouncer: PgBouncer,
    broker: str,
    env: dict[str, str],
) -> None:
    state: dict[str, Any] = {
        "url": url,
        "provider_url": f"http://127.0.0.1:{env['PROVIDER_PORT']}/sandbox",
        "nodes": [
            {
                "name": node.name,
                "url": f"http://127.0.0.1:{node.port}",
                "pids": sorted(
                    pid
                    for child in node.children
                    for pid in group_pids(child.process.pid if child.process else None)
                ),
            }
            for node in nodes
        ],
        "workers": [
            {"name": child.name, "pids": group_pids(child.process.pid if child.process else None)}
            for node in nodes
            for child in node.children
            if child.name.endswith("-worker")
        ],
        "primary": pair.primary.url(DATABASE),
        "replica": pair.replica.url(DATABASE),
        "pgbouncer": bouncer.url(DATABASE),
        "broker": broker,
        "env": env,
    }
    text = json.dumps(state, indent=2) + "\n"
    if STATE_FILE.exists() and STATE_FILE.read_text() == text:
        return
    # Renamed into place: a reader never sees half a file.
    partial = STATE_FILE.with_suffix(".tmp")
    partial.write_text(text)
    partial.replace(STATE_FILE)


def _wait_healthy(urls: list[str]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    for base in urls:
        while True:
            try:
                if requests.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{base} did not answer /healthz")
            time.sleep(0.2)  # a booting server has no readiness signal beyond answering


def _revive(
    name: str, alive: bool, start: Callable[[], None], restarts: Restarts, now: float
) -> bool:
    """Start ``name`` again once its backoff is over; True when it was started."""
    if alive:
        if now - restarts.started_at > STABLE_AFTER_S:
            restarts.backoff_s = RESTART_FIRST_S
        return False
    if restarts.at is None:
        restarts.at = now + restarts.backoff_s
        print(f"[cluster] {name} died; restarting in {restarts.backoff_s:.0f} s", flush=True)
        restarts.backoff_s = min(restarts.backoff_s * 2, RESTART_CAP_S)
        return False
    if now < restarts.at:
        return False
    try:
        start()
    except Exception as error:  # an engine that will not come back yet: try later
        print(f"[cluster] {name} did not start: {error}", flush=True)
        restarts.at = now + restarts.backoff_s
        return False
    restarts.at, restarts.started_at = None, now
    print(f"[cluster] {name} restarted", flush=True)
    return True


class StartFailed(Exception):
    """A step of the start did not happen; the message says which and why, in one line."""


def _step(what: str, action: Callable[[], None]) -> None:
    try:
        action()
    except Exception as error:
        said = " ".join(str(error).split()) or type(error).__name__
        raise StartFailed(f"{what}{said}") from error


def main() -> int:
    port = int(os.environ.get("PORT", "8000"))
    count = int(os.environ.get("CLUSTER_NODES", "3"))
    broker = os.environ.get("CLUSTER_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    problems = preflight.problems(broker=broker, redis_url=redis_url)
    if problems:
        print(preflight.message(problems), file=sys.stderr)
        return 2
    CLUSTER_DIR.mkdir(parents=True, exist_ok=True)
    # An earlier run that was killed left its engines running on its ports, over the
    # data directories this one needs: they go first.
    try:
        stopped = stop_leftovers(CLUSTER_DIR)
    except AlreadyRunning as running:
        print(f"make cluster could not start: {running}; stop it first", file=sys.stderr)
        return 2
    if stopped:
        print(f"[cluster] stopped what a killed run left running: {', '.join(stopped)}")

    stopping: list[bool] = []

    def stop(_signum: int, _frame: object) -> None:
        stopping.append(True)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    # Everything is described before anything starts, so that whatever a failed start
    # got to is stopped below (each stop does nothing for what never started).
    primary_port, replica_port = port + PRIMARY_PORT_OFFSET, port + REPLICA_PORT_OFFSET
    bouncer = PgBouncer(
        work_dir=CLUSTER_DIR / "pgbouncer",
        port=port + PGBOUNCER_PORT_OFFSET,
        targets=[
            Target(DATABASE, primary_port, DATABASE),
            Target(f"{DATABASE}_replica", replica_port, DATABASE),
        ],
        lock_timeout_ms=LOCK_TIMEOUT_MS,
    )
    env = _cluster_env(port, bouncer, broker, redis_url)
    bin_dir = os.path.dirname(sys.executable)
    nodes = _nodes(count, port, bin_dir)
    provider = Child(
        "provider",
        _gunicorn(bin_dir, str(port + 1)),
        provider=True,
        env={"SANDBOX_ONLY": "true", **_metrics("provider")},
    )
    balancer = HAProxy(CLUSTER_DIR / "haproxy", port, [(node.name, node.port) for node in nodes])
    children = [provider, *(child for node in nodes for child in node.children)]
    pairs: list[Pair] = []  # the pair, once it started

    def record_run() -> None:
        # What a killed run would leave running, for the next one to stop (leftovers.py).
        servers = [(s.name, s.pid, signal.SIGINT) for p in pairs for s in (p.primary, p.replica)]
        record(
            CLUSTER_DIR,
            [
                *servers,
                ("pgbouncer", bouncer.pid, signal.SIGINT),
                ("haproxy", balancer.pid, signal.SIGTERM),
                *((c.name, c.process.pid if c.process else None, signal.SIGTERM) for c in children),
            ],
        )

    try:
        try:
            _step(
                "",
                lambda: pairs.append(
                    start_pair(
                        CLUSTER_DIR / "pg",
                        primary_port=primary_port,
                        replica_port=replica_port,
                        durable=True,
                    )
                ),
            )
            record_run()
            pair = pairs[0]
            _step("creating the database: ", lambda: _ensure_database(pair))
            _step(f"PgBouncer on 127.0.0.1:{bouncer.port}: ", bouncer.start)
            record_run()
            os.environ.update(env)
            # The schema on the primary directly (DDL needs no pooler); the replica gets
            # it by streaming. The demo's data through PgBouncer, as the nodes write.
            primary_env = {**os.environ, "DATABASE_URL": pair.primary.url(DATABASE)}
            _step("migrate: ", lambda: _manage(primary_env, "migrate", "--no-input", "-v", "0"))
            _step("collectstatic: ", lambda: _manage(dict(os.environ), "collectstatic",
                                                     "--no-input", "-v", "0"))  # fmt: skip
            _step("seed_demo: ", lambda: _manage(dict(os.environ), "seed_demo"))
            for child in children:
                child.start()
            _step(f"HAProxy on 127.0.0.1:{port}: ", balancer.start)
            record_run()
            url = f"http://127.0.0.1:{port}"
            provider_url = f"http://127.0.0.1:{port + 1}"
            # Announced (state.json, the banner) once every web server answers: a
            # newcomer's first request then never meets a node still booting.
            bases = [f"http://127.0.0.1:{node.port}" for node in nodes] + [url, provider_url]
            _step("", lambda: _wait_healthy(bases))
        except StartFailed as failed:
            print(f"make cluster could not start: {failed}", file=sys.stderr, flush=True)
            return 1
        write = lambda: write_state(  # noqa: E731
            url=url, nodes=nodes, pair=pair, bouncer=bouncer,
            broker=broker, env=env,
        )  # fmt: skip
        write()
        print(
            f"\nOnceShop cluster: {url}/  ({count} web nodes behind HAProxy; Ctrl-C stops it)"
            f"\nIts payment provider (the sandbox): http://127.0.0.1:{port + 1}/sandbox/"
            f"\nState: {STATE_FILE}\n",
            flush=True,
        )
        engines = [
            Engine("primary", pair.primary.start, pair.primary.stop, lambda: pair.primary.process),
            Engine("replica", pair.replica.start, pair.replica.stop, lambda: pair.replica.process),
            Engine("pgbouncer", bouncer.start, bouncer.stop, lambda: bouncer.process),
            Engine("haproxy", balancer.start, balancer.stop, lambda: balancer.process),
        ]
        restarts = {
            name: Restarts() for name in [e.name for e in engines] + [c.name for c in children]
        }
        next_state = time.monotonic() + STATE_EVERY_S
        while not stopping:
            now = time.monotonic()
            changed = False
            for engine in engines:
                changed |= _revive(
                    engine.name, engine.alive, engine.start, restarts[engine.name], now
                )
            for child in children:
                if not child.alive and restarts[child.name].at is None:
                    # Whatever is left of its group goes too: no orphaned pool.
                    child.signal_group(signal.SIGKILL)
                changed |= _revive(child.name, child.alive, child.start, restarts[child.name], now)
            if changed:
                record_run()
            # Forks come and go (gunicorn replaces a worker, celery its pool): the
            # state follows them, checked every STATE_EVERY_S.
            if changed or now >= next_state:
                write()
                next_state = now + STATE_EVERY_S
            time.sleep(0.2)
        print("[cluster] stopping", flush=True)
    finally:
        balancer.stop()
        _stop(children)
        bouncer.stop()
        for started in pairs:
            started.stop()
        STATE_FILE.unlink(missing_ok=True)
        forget(CLUSTER_DIR)
    return 0
