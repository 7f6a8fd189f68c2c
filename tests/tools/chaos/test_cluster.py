"""The cluster run: its nemesis (which processes a node kill takes, read from state.json),
its ports, and a start-up that fails told apart from a verdict."""

import json
import os
import random
import socket
import subprocess
import sys

import pytest

from tests.processes import ROOT
from tools.chaos.cluster import (
    CLUSTER_WEIGHTS,
    PORT_FLOOR,
    PORT_SPAN,
    RABBITMQCTL,
    ClusterDeployment,
    ClusterNemesis,
    ephemeral_ports,
    free_port_block,
    node_victims,
    pidfile_pid,
)
from tools.chaos.history import History, history_read


def _state(nodes):
    return {"nodes": [{"name": name, "url": "", "pids": pids} for name, pids in nodes]}


def test_a_node_kill_takes_every_pid_of_one_node_and_none_of_another():
    state = _state([("node-1", [10, 11, 12]), ("node-2", [20, 21]), ("node-3", [30])])

    chosen = [node_victims(state, random.Random(seed)) for seed in range(50)]

    assert {name for name, _ in chosen} == {"node-1", "node-2", "node-3"}
    pids_of = {node["name"]: node["pids"] for node in state["nodes"]}
    assert all(pids == pids_of[name] for name, pids in chosen)


def test_a_node_the_runner_is_restarting_is_not_chosen():
    state = _state([("node-1", []), ("node-2", [21, 20])])

    assert node_victims(state, random.Random(1)) == ("node-2", [20, 21])


def test_the_pid_is_the_first_line_of_postgresqls_pidfile(tmp_path):
    pidfile = tmp_path / "postmaster.pid"
    pidfile.write_text("4242\n/var/lib/data\n1733100000\n5432\n")

    assert pidfile_pid(pidfile) == 4242


def test_the_cluster_nemesis_strikes_the_clusters_faults_only(tmp_path):
    nemesis = _nemesis(tmp_path, _state([]))

    assert set(nemesis.kinds) == set(CLUSTER_WEIGHTS)
    assert {"kill-node", "restart-pgbouncer", "restart-broker", "replica-lag"} <= set(nemesis.kinds)
    assert "kill-shop-master" not in nemesis.kinds  # no such process in the cluster


def test_kill_node_kills_every_process_of_the_node_in_state_json_at_once(tmp_path):
    # given: two "nodes" of real processes, their pids in state.json
    processes = {name: [_sleeper(), _sleeper()] for name in ("node-1", "node-2")}
    everyone = [p for procs in processes.values() for p in procs]
    try:
        state = _state([(name, [p.pid for p in procs]) for name, procs in processes.items()])
        nemesis = _nemesis(tmp_path, state)

        # when
        assert nemesis.strike("kill-node")

        # then: the node it names is gone entirely, the other untouched
        nemesis.history.close()
        (struck,) = [e for e in history_read(tmp_path / "history.jsonl") if e["type"] == "nemesis"]
        victims = processes.pop(struck["target"])
        assert struck["pids"] == sorted(p.pid for p in victims)
        assert [p.wait(timeout=5) for p in victims] == [-9, -9]
        (spared,) = processes.values()
        assert [p.poll() for p in spared] == [None, None]
    finally:
        for process in everyone:
            process.kill()
            process.wait()


def _sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _nemesis(tmp_path, state):
    deployment = ClusterDeployment(port=30000, env={}, out=tmp_path, vhost="unused")
    deployment.directory.mkdir(parents=True)
    deployment.state_file.write_text(json.dumps(state))
    return ClusterNemesis(
        deployment=deployment,
        history=History(tmp_path / "history.jsonl"),
        seed=1,
        database_url="postgres://unused/unused",
        staff_token="unused",
    )


def test_the_runners_restarts_are_counted_from_its_log(tmp_path):
    deployment = ClusterDeployment(port=30000, env={}, out=tmp_path, vhost="unused")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "cluster.log").write_text(
        "[cluster] node-2-web died; restarting in 1 s\n"
        "[cluster] node-2-web restarted\n"
        "2026-12-02 INFO celery task restarted\n"
        "[cluster] replica did not start: exited\n"
        "[cluster] node-2-web restarted\n"
        "[cluster] pgbouncer restarted\n"
    )

    assert deployment.restarts() == {"node-2-web": 2, "pgbouncer": 1}


def test_a_port_block_lies_below_the_kernels_ephemeral_ports():
    # An outgoing connection (of this run, or of another) can take any ephemeral port
    # between the probe and the cluster's bind: a block there fails the start under load.
    below = ephemeral_ports()[0]

    bases = [free_port_block() for _ in range(20)]

    assert all(base >= PORT_FLOOR and base + PORT_SPAN <= below for base in bases), bases


def test_the_ephemeral_range_is_read_from_the_kernel(tmp_path):
    listed = tmp_path / "ip_local_port_range"
    listed.write_text("40000\t50000\n")

    assert ephemeral_ports(listed) == (40000, 50000)
    assert ephemeral_ports(tmp_path / "absent") == (32768, 60999)


@pytest.mark.slow
@pytest.mark.skipif(not os.access(RABBITMQCTL, os.X_OK), reason="needs rabbitmqctl")
def test_a_cluster_that_never_becomes_ready_exits_3_with_no_verdict(tmp_path):
    # Given a machine where the cluster cannot start (its Redis does not answer: the
    # cluster's runner refuses to start and exits at once)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nobody = probe.getsockname()[1]
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{nobody}/0"}

    # When the cluster run is started
    done = subprocess.run(
        [
            *(sys.executable, "-m", "tools.chaos", "--topology", "cluster"),
            *("--orders", "1", "--clients", "1", "--out", str(tmp_path)),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    # Then it says so, apart from any verdict, and nothing was tried
    assert done.returncode == 3, done.stdout + done.stderr
    assert "the cluster never became ready" in done.stderr
    assert "violation" not in done.stdout
    assert not (tmp_path / "report.md").exists()
