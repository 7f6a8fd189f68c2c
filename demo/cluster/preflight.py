"""What `make cluster` needs from the machine, all named in one message."""

from __future__ import annotations

import os
import shutil

import kombu
import redis

from demo.cluster.haproxy import HAPROXY
from demo.cluster.pgbouncer import PGBOUNCER
from demo.cluster.postgres import pg_binary

# Debian's package for each engine; the message gives one command for all of them.
PACKAGES = {
    "haproxy": "haproxy",
    "pgbouncer": "pgbouncer",
    "postgresql": "postgresql",
    "rabbitmq": "rabbitmq-server",
    "redis": "redis-server",
}


def problems(*, broker: str, redis_url: str) -> dict[str, str]:
    """Engine -> what is wrong with it; empty when everything is there."""
    found: dict[str, str] = {}
    if not os.access(HAPROXY, os.X_OK):
        found["haproxy"] = f"{HAPROXY} is missing"
    if not os.access(PGBOUNCER, os.X_OK):
        found["pgbouncer"] = f"{PGBOUNCER} is missing"
    for tool in ("initdb", "pg_basebackup", "postgres"):
        try:
            pg_binary(tool)
        except FileNotFoundError:
            found["postgresql"] = f"{tool} is missing"
    try:
        with kombu.Connection(broker, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)
    except Exception as error:
        installed = shutil.which("rabbitmq-server") or shutil.which("rabbitmqctl")
        found["rabbitmq"] = f"no broker at {broker} ({error})" + (
            "; it is installed: start it (service rabbitmq-server start)" if installed else ""
        )
    try:
        redis.Redis.from_url(redis_url, socket_connect_timeout=2).ping()
    except redis.RedisError as error:
        found["redis"] = f"no Redis at {redis_url} ({error})"
    return found


def message(found: dict[str, str]) -> str:
    lines = ["make cluster cannot start; it needs:"]
    lines += [f"  - {engine}: {why}" for engine, why in found.items()]
    packages = " ".join(PACKAGES[engine] for engine in found)
    lines.append(f"Install what is missing with: sudo apt-get install -y {packages}")
    return "\n".join(lines)
