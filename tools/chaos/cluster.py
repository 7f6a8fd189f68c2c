"""``make chaos TOPOLOGY=cluster``: the same run against ``make cluster``'s topology.

The run starts the cluster itself (``python -m demo.cluster``, supervised by its
own runner) under ``tools/chaos/out/cluster/``, fresh every time, on a block of
free ports: attaching to someone's running cluster would mix the run's books
with theirs. Customers address HAProxy; the nemesis reads the pids of every
node from the cluster's ``state.json`` and adds the faults that only a cluster
has (docs/reliability.md, "Across nodes"):

- ``kill-node``: SIGKILL every process of one node at once (its web server and,
  on the first two nodes, its worker and beat); the runner brings it back;
- ``restart-pgbouncer``: SIGTERM PgBouncer (its immediate shutdown: every client
  and server connection is cut); the runner starts it again;
- ``restart-broker``: every connection of the run's RabbitMQ virtual host is
  closed (``rabbitmqctl close_all_connections -p``). The machine's RabbitMQ may
  serve others, so the run never stops it (``stop_app`` would take everyone's
  queues down): it gets a virtual host of its own, and for Celery a closed
  connection is what a broker restart looks like (the unacknowledged messages go
  back to the quorum queue, the workers reconnect);
- ``replica-lag``: ``recovery_min_apply_delay`` on the replica (``ALTER SYSTEM``
  and a reload) for a few seconds;
- ``stop-replica``: a fast shutdown of the replica; while it is down the list
  endpoint is read through HAProxy, and what it answered is recorded (the router
  falls back to the primary, config/dbrouter.py). The runner starts it again.

``kill-celery``, ``terminate-backends`` (on the primary), ``provider-faults`` and
``customers-must-act`` are the single-machine run's, on the cluster's processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import requests

from tools.chaos.deployment import Process
from tools.chaos.nemesis import WEIGHTS, Nemesis

CLUSTER_NODES = 3
RABBITMQCTL = "/usr/sbin/rabbitmqctl"  # Debian's rabbitmq-server
# The cluster's ports span PORT .. PORT+31 (demo/cluster/runner.py's offsets).
PORT_SPAN = 32
# Blocks are chosen from here up to the kernel's ephemeral range (listed in this file).
PORT_FLOOR = 20000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Starting the cluster runs initdb, pg_basebackup, the migrations and three
# gunicorns on a busy 2-core machine: minutes, not seconds.
CLUSTER_READY_S = 300.0
# Replica lag: long enough that the list pages read visibly old rows, short enough
# that the replica catches up between two faults.
REPLICA_DELAY_MS = (500, 5000)
REPLICA_LAG_HOLD_S = (2.0, 6.0)
# The runner stops the cluster in reverse order, the databases' checkpoints last.
CLUSTER_STOP_S = 60.0
CLUSTER_WEIGHTS = {
    "provider-faults": WEIGHTS["provider-faults"],
    "customers-must-act": WEIGHTS["customers-must-act"],
    "kill-celery": WEIGHTS["kill-celery"],
    "terminate-backends": WEIGHTS["terminate-backends"],
    "kill-node": 1,
    "restart-pgbouncer": 1,
    "restart-broker": 1,
    "replica-lag": 2,
    "stop-replica": 1,
}


class ClusterNotReady(RuntimeError):
    """The cluster never answered: the machine or an engine failed, no verdict on the shop."""


def ephemeral_ports(path: Path = EPHEMERAL_RANGE) -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections (Linux's default if unknown)."""
    try:
        low, high = path.read_text().split()
    except (OSError, ValueError):
        return 32768, 60999
    return int(low), int(high)


def free_port_block(span: int = PORT_SPAN) -> int:
    """A base port with ``span`` free ports from it (probed: nothing listens there).

    Below the kernel's ephemeral range: a port in it can be taken by any outgoing
    connection (this run's customers, another run's) between the probe and the
    cluster's bind, and a loaded machine opens thousands of them.
    """
    rng = random.Random()
    below = ephemeral_ports()[0]
    for _ in range(200):
        base = rng.randrange(PORT_FLOOR, below - span, 100)
        if all(_free(base + offset) for offset in range(span)):
            return base
    raise RuntimeError(f"no block of {span} free ports found")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def node_victims(state: dict[str, Any], rng: random.Random) -> tuple[str, list[int]]:
    """One node of ``state`` and every pid it runs, to be killed at once."""
    nodes = [node for node in state["nodes"] if node["pids"]]
    if not nodes:
        raise RuntimeError("state.json lists no running node")
    node = rng.choice(nodes)
    return node["name"], sorted(node["pids"])


def pidfile_pid(path: Path) -> int:
    """The pid on the first line of a pidfile (PostgreSQL's postmaster.pid, PgBouncer's)."""
    return int(path.read_text().split()[0])


def rabbitmqctl(*args: str) -> str:
    try:
        done = subprocess.run(
            [RABBITMQCTL, *args], capture_output=True, text=True, check=False, timeout=60
        )
    except subprocess.TimeoutExpired as error:
        raise RuntimeError(f"rabbitmqctl {args[0]}: no answer in {error.timeout:.0f} s") from None
    if done.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {args[0]} failed: {done.stderr.strip()}")
    return done.stdout


@dataclass
class ClusterDeployment:
    """The cluster as the run sees it: ``demo.cluster``'s runner and its state.json."""

    port: int
    env: dict[str, str]  # the runner's environment (the run's settings included)
    out: Path
    vhost: str
    runner: Process | None = None
    own_redis: bool = False  # the cluster's Redis is REDIS_URL's: never restarted
    processes: dict[str, Process] = field(default_factory=dict)
    on_restart: Callable[[str], None] | None = None

    @property
    def directory(self) -> Path:
        return self.out / "cluster"

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

    def state(self) -> dict[str, Any]:
        return dict(json.loads(self.state_file.read_text()))

    @property
    def shop_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{self.port}"]  # HAProxy

    @property
    def provider_url(self) -> str:
        return f"http://127.0.0.1:{self.port + 1}"

    @property
    def broker_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:5672/{self.vhost}"

    @property
    def queue(self) -> str:
        return f"onceshop-cluster-{self.port}"  # demo/cluster/runner.py's CELERY_QUEUE

    def build(self) -> None:
        self.runner = Process(
            name="cluster",
            argv=[sys.executable, "-m", "demo.cluster"],
            env={
                **self.env,
                "PORT": str(self.port),
                "CLUSTER_NODES": str(CLUSTER_NODES),
                "CLUSTER_BROKER_URL": self.broker_url,
                "ONCESHOP_VAR_DIR": str(self.out),
                # The runner waits for its web servers as long as the run waits for it.
                "CLUSTER_READY_TIMEOUT_S": str(CLUSTER_READY_S),
            },
            log_dir=self.out / "logs",
        )

    def start(self) -> None:
        """Start the runner (a no-op when it runs) and wait for its state.json.

        Raises ClusterNotReady if the broker's virtual host cannot be set up, the
        runner exits, or the cluster does not answer within CLUSTER_READY_S.
        """
        assert self.runner is not None
        if self.runner.alive:
            return
        with contextlib.suppress(RuntimeError):
            rabbitmqctl("add_vhost", self.vhost)
        try:
            rabbitmqctl("set_permissions", "-p", self.vhost, "guest", ".*", ".*", ".*")
        except RuntimeError as error:
            raise ClusterNotReady(f"the run's virtual host: {error}") from None
        self.state_file.unlink(missing_ok=True)
        self.runner.start()
        log = self.out / "logs" / "cluster.log"
        deadline = time.monotonic() + CLUSTER_READY_S
        while not self.state_file.exists():
            if not self.runner.alive:
                raise ClusterNotReady(f"the cluster's runner exited; see {log}")
            if time.monotonic() > deadline:
                raise ClusterNotReady(f"the cluster did not come up in {CLUSTER_READY_S:.0f} s")
            time.sleep(0.5)  # the runner writes state.json once every node answers
        self.wait_ready()

    def wait_ready(self) -> None:
        """Every node and HAProxy answer /healthz; ClusterNotReady after CLUSTER_READY_S."""
        deadline = time.monotonic() + CLUSTER_READY_S
        for url in [*self.shop_urls, *(node["url"] for node in self.state()["nodes"])]:
            while not _healthy(url):
                if time.monotonic() > deadline:
                    raise ClusterNotReady(f"{url} did not answer /healthz")
                time.sleep(0.5)

    def stop(self) -> None:
        if self.runner is None or not self.runner.alive:
            return
        os.killpg(self.runner.pid, signal.SIGTERM)  # the runner stops everything it started
        with contextlib.suppress(subprocess.TimeoutExpired):
            assert self.runner.popen is not None
            self.runner.popen.wait(timeout=CLUSTER_STOP_S)
        self.runner.kill_group()

    def restarts(self) -> dict[str, int]:
        """What the cluster's runner started again so far, by name (from its log)."""
        log = self.out / "logs" / "cluster.log"
        names = re.findall(r"^\[cluster\] (\S+) restarted$", log.read_text(), re.MULTILINE)
        return dict(Counter(names))

    def remove_vhost(self) -> None:
        with contextlib.suppress(RuntimeError):
            rabbitmqctl("delete_vhost", self.vhost)

    def queue_depth(self) -> tuple[int, int]:
        """Messages ready and unacknowledged on the run's queues."""
        columns = ["name", "messages_ready", "messages_unacknowledged"]
        listed = rabbitmqctl("list_queues", "-p", self.vhost, "--formatter", "json", *columns)
        rows = json.loads(listed or "[]")
        ready = sum(int(row.get("messages_ready") or 0) for row in rows)
        unacked = sum(int(row.get("messages_unacknowledged") or 0) for row in rows)
        return ready, unacked


def _healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=3).status_code == 200
    except requests.RequestException:
        return False


class ClusterNemesis(Nemesis):
    """The single-machine nemesis's faults that a cluster shares, and the cluster's own."""

    deployment: ClusterDeployment  # type: ignore[assignment]

    def __init__(self, *, deployment: ClusterDeployment, **kwargs: Any) -> None:
        super().__init__(deployment=deployment, **kwargs)  # type: ignore[arg-type]
        self.kinds = {
            "provider-faults": self.provider_faults,
            "customers-must-act": self.customers_must_act,
            "kill-celery": self.kill_cluster_celery,
            "terminate-backends": self.terminate_backends,
            "kill-node": self.kill_node,
            "restart-pgbouncer": self.restart_pgbouncer,
            "restart-broker": self.restart_broker,
            "replica-lag": self.replica_lag,
            "stop-replica": self.stop_replica,
        }
        self.weights = CLUSTER_WEIGHTS

    def kill_node(self) -> dict[str, Any]:
        name, pids = node_victims(self.deployment.state(), self.rng)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                self._kill(pid)
        return {"target": name, "pids": pids}

    def kill_cluster_celery(self) -> dict[str, Any]:
        worker = self.rng.choice([w for w in self.deployment.state()["workers"] if w["pids"]])
        pid = self.rng.choice(worker["pids"])
        self._kill(pid)
        return {"target": worker["name"], "pid": pid}

    def restart_pgbouncer(self) -> dict[str, Any]:
        pid = pidfile_pid(self.deployment.directory / "pgbouncer" / "pgbouncer.pid")
        os.kill(pid, signal.SIGTERM)  # PgBouncer's immediate shutdown
        return {"target": "pgbouncer", "pid": pid}

    def restart_broker(self) -> dict[str, Any]:
        vhost = self.deployment.vhost
        rabbitmqctl("close_all_connections", "-p", vhost, "chaos: broker restart")
        return {"target": "rabbitmq", "vhost": vhost}

    def replica_lag(self) -> dict[str, Any]:
        delay_ms = self.rng.randint(*REPLICA_DELAY_MS)
        hold_s = round(self.rng.uniform(*REPLICA_LAG_HOLD_S), 1)
        replica = self.deployment.state()["replica"]
        _apply_delay(replica, f"{delay_ms}ms")
        try:
            time.sleep(hold_s)
        finally:
            _apply_delay(replica, "0")
        return {"target": "replica", "delay_ms": delay_ms, "hold_s": hold_s}

    def stop_replica(self) -> dict[str, Any]:
        pid = pidfile_pid(self.deployment.directory / "pg" / "replica" / "postmaster.pid")
        os.kill(pid, signal.SIGINT)  # fast shutdown
        # While it is down: what the list pages answer (through HAProxy, as customers).
        time.sleep(1.0)
        answered = requests.get(
            f"{self.deployment.shop_urls[0]}/api/v1/orders/",
            headers={"Authorization": f"Token {self.staff_token}"},
            timeout=20,
        ).status_code
        return {"target": "replica", "pid": pid, "list_status_while_down": answered}


def _apply_delay(replica_url: str, delay: str) -> None:
    with psycopg.connect(replica_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"ALTER SYSTEM SET recovery_min_apply_delay = '{delay}'".encode())
        conn.execute("SELECT pg_reload_conf()")
