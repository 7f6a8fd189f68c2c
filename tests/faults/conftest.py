"""Fixtures of the fault tests: a Redis of the test's own (tests/redis_servers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis_servers import RedisServer, own_redis


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with own_redis(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def redis_stopped(redis_server: RedisServer) -> RedisServer:
    redis_server.stop()
    return redis_server
