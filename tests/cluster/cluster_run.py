"""The whole `make cluster`, started, used, hit by a node kill, and stopped.

Not collected by `make test` (the name does not start with ``test_``): it needs
the machine's RabbitMQ and HAProxy and takes a few minutes. `make cluster-test`
runs it. It starts the cluster (PostgreSQL pair, PgBouncer, HAProxy, two web
nodes, workers and beats) in a temporary directory, uses it through the load
balancer, kills every process of one node at once, and stops it with SIGINT.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from tests.cluster.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
STATE_KEYS = {
    "url",
    "provider_url",
    "nodes",
    "workers",
    "primary",
    "replica",
    "pgbouncer",
    "broker",
    "env",
}
# Minutes on a busy shared machine: the PostgreSQL pair, migrations, the seed, four
# gunicorns and two workers all start from nothing.
START_TIMEOUT_S = 420.0


def _free_block(size: int = 40) -> int:
    """A base port with the next ``size`` ports free (the cluster's layout)."""
    for _ in range(50):
        base = free_port()
        if base + size > 65535:
            continue
        try:
            for port in range(base, base + size):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free block of ports")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; it waits only for its parent to collect it.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)  # the runner has no signal to await: poll its state file


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_cluster_serves_through_haproxy_survives_a_node_kill_and_stops_entirely(tmp_path):
    port = _free_block()
    state_file = tmp_path / "cluster" / "state.json"
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update(
        PORT=str(port),
        CLUSTER_NODES="2",
        ONCESHOP_VAR_DIR=str(tmp_path),
        DEMO_MODE="true",
        LOG_LEVEL="WARNING",
    )
    runner = subprocess.Popen(
        [sys.executable, "-m", "demo.cluster"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(state_file.exists, START_TIMEOUT_S, "state.json never appeared")
        state = json.loads(state_file.read_text())
        # Then the state has exactly the contract's shape
        assert set(state) == STATE_KEYS
        assert [node["name"] for node in state["nodes"]] == ["node-1", "node-2"]
        assert [w["name"] for w in state["workers"]] == ["node-1-worker", "node-2-worker"]
        assert state["env"]["DATABASE_TRANSACTION_POOLING"] == "true"
        assert state["env"]["CELERY_BROKER_URL"].startswith("amqp://")

        # And the shop answers through the load balancer, a retry being a replay
        base = state["url"]
        token = requests.post(
            f"{base}/api/v1/auth/token/",
            timeout=10,
            json={"username": "alice", "password": "alice-pays-once"},
        )
        headers = {
            "Authorization": f"Token {token.json()['token']}",
            "Idempotency-Key": uuid.uuid4().hex,
        }
        body = {"lines": [{"sku": "MUG-CELADON", "quantity": 1}]}
        first = requests.post(f"{base}/api/v1/orders/", json=body, headers=headers, timeout=60)
        again = requests.post(f"{base}/api/v1/orders/", json=body, headers=headers, timeout=60)
        assert first.status_code == 201
        assert again.headers["Idempotent-Replayed"] == "true"

        # When every process of node-1 is killed at once
        _wait_for(
            lambda: len(json.loads(state_file.read_text())["nodes"][0]["pids"]) >= 5,
            60,
            "node-1 never forked its workers",
        )
        victims = json.loads(state_file.read_text())["nodes"][0]["pids"]
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        # Then the shop answers again (node-2) once HAProxy has seen node-1 fail: a
        # client retrying every half second gets there within a few tries
        answers = []
        for _ in range(20):
            answers.append(requests.get(f"{base}/api/v1/products/", timeout=60).status_code)
            if answers[-1] == 200:
                break
            time.sleep(0.5)  # a client's retry interval
        assert answers[-1] == 200, answers
        assert len(answers) <= 4, answers
        _wait_for(
            lambda: (
                (pids := json.loads(state_file.read_text())["nodes"][0]["pids"])
                and not set(pids) & set(victims)
            ),
            60,
            "node-1 was not restarted",
        )
        everything = [
            pid for node in json.loads(state_file.read_text())["nodes"] for pid in node["pids"]
        ]
    finally:
        runner.send_signal(signal.SIGINT)
        runner.wait(timeout=120)
    # And Ctrl-C stops all of it, state file included
    assert runner.returncode == 0
    assert not [pid for pid in everything if _alive(pid)]
    assert not state_file.exists()
