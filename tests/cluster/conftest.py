"""A real PgBouncer (transaction pooling) in front of the tests' PostgreSQL.

``through_pgbouncer`` points every new connection of the ``default`` alias at it,
with exactly the settings ``DATABASE_TRANSACTION_POOLING=true`` gives
(config/databases.py), for one test; the test database is the usual one.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connections

from config.databases import databases
from demo.cluster.pgbouncer import PgBouncer, Target

# Small, so that consecutive transactions of one client really do change server
# connection whenever another client holds one (PgBouncer hands out the most
# recently released server connection first).
POOL_SIZE = 4
# Short, so a test of a lock wait through the pooler ends quickly.
LOCK_TIMEOUT_MS = 300


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def pgbouncer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgBouncer]:
    server_port = int(settings.DATABASES["default"]["PORT"] or 5432)
    bouncer = PgBouncer(
        work_dir=Path(tmp_path_factory.mktemp("pgbouncer")),
        port=free_port(),
        # "*": whatever database the client names, on the tests' server.
        targets=[Target("*", server_port)],
        lock_timeout_ms=LOCK_TIMEOUT_MS,
        pool_size=POOL_SIZE,
    )
    bouncer.start()
    try:
        yield bouncer
    finally:
        bouncer.stop()


def pooled_settings(bouncer: PgBouncer, *, transaction_pooling: bool) -> dict[str, Any]:
    """The default alias's settings as config/databases.py builds them, via ``bouncer``."""
    name = connections["default"].settings_dict["NAME"]
    entry = databases(
        url=bouncer.url(name),
        replica_url="",
        conn_max_age=0,
        lock_timeout_ms=LOCK_TIMEOUT_MS,
        transaction_pooling=transaction_pooling,
    )["default"]
    return connections.configure_settings({"default": entry})["default"]


@pytest.fixture
def through_pgbouncer(pgbouncer: PgBouncer) -> Iterator[PgBouncer]:
    # Every thread's connection is built from this one dict: changed in place, it
    # sends the test's connections (and its threads') through the pooler.
    shared = connections.settings["default"]
    saved = dict(shared)
    pooled = pooled_settings(pgbouncer, transaction_pooling=True)
    pooled["TEST"] = saved["TEST"]
    connections.close_all()
    shared.clear()
    shared.update(pooled)
    try:
        yield pgbouncer
    finally:
        connections.close_all()
        shared.clear()
        shared.update(saved)
