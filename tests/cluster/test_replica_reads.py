"""A replay never reads the replica, even while the replica lags.

A real pair is built for this module: a primary and its streaming replica (hot
standby), initdb + pg_basebackup in a temporary directory (demo/cluster/postgres.py,
what ``make cluster`` runs). The scenarios (tests/cluster/replica_scenarios.py) need
the whole test database on that primary, with the ``replica`` alias on its standby,
so they run as their own pytest session with DATABASE_URL and DATABASE_REPLICA_URL
pointing there; this test starts it and requires every scenario to pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo.cluster.postgres import Pair, start_pair
from tests.cluster.conftest import free_port

SCENARIOS = Path(__file__).with_name("replica_scenarios.py")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    root = Path(tmp_path_factory.mktemp("replica-pair")) / "pg"
    built = start_pair(root, primary_port=free_port(), replica_port=free_port(), durable=False)
    try:
        yield built
    finally:
        built.stop()


@pytest.mark.slow
def test_replays_and_key_lookups_read_the_primary_while_lists_read_the_lagging_replica(pair):
    env = {
        **os.environ,
        "DATABASE_URL": pair.primary.url("onceshop"),
        "DATABASE_REPLICA_URL": pair.replica.url("onceshop"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(SCENARIOS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " passed" in done.stdout
    assert "skipped" not in done.stdout
