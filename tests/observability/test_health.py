"""/healthz and /readyz: real dependencies, real closed ports (no mocks)."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection
from django.test import Client

from tests.processes import child_database_url, run_django

READYZ_IN_A_CHILD = """
from django.test import Client
response = Client().get("/readyz")
print(response.status_code, response["Content-Type"])
print(response.content.decode())
"""


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def readyz_with(**env: str) -> tuple[int, str, dict]:
    """/readyz answered by a fresh process whose settings come from ``env``."""
    child = run_django(READYZ_IN_A_CHILD, env=env)
    assert child.returncode == 0, child.stderr
    head, body = child.stdout.strip().split("\n", 1)
    status, content_type = head.split(" ", 1)
    return int(status), content_type, json.loads(body)


def test_healthz_answers_without_touching_anything():
    response = Client().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_is_200_when_the_database_is_migrated_and_redis_answers():
    response = Client().get("/readyz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}


@pytest.mark.django_db
def test_the_probes_need_no_allowed_host_session_or_throttle():
    # A load balancer probes by IP: the Host header is not one of ALLOWED_HOSTS.
    response = Client().get("/readyz", HTTP_HOST="10.1.2.3")

    assert response.status_code == 200
    assert "Set-Cookie" not in response
    assert "Vary" not in response  # no session or auth was looked at


@pytest.mark.django_db
def test_readyz_is_503_naming_redis_when_redis_is_unreachable():
    status, content_type, body = readyz_with(REDIS_URL=f"redis://127.0.0.1:{closed_port()}/0")

    assert status == 503
    assert content_type == "application/problem+json"
    assert body["code"] == "not-ready"
    assert body["failed"] == ["redis"]
    assert body["checks"] == {"database": "ok", "redis": "unreachable"}
    assert "127.0.0.1" not in json.dumps(body)  # no URL, host or error text leaks


@pytest.mark.django_db
def test_readyz_is_503_naming_the_database_when_postgresql_is_unreachable():
    url = f"postgresql://postgres@127.0.0.1:{closed_port()}/onceshop"

    status, _, body = readyz_with(DATABASE_URL=url)

    assert status == 503
    assert body["failed"] == ["database"]
    assert body["checks"] == {"database": "unreachable", "redis": "ok"}
    assert body["detail"] == "Not ready: database unreachable."


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A real, empty database on the test server: reachable, nothing migrated."""
    settings = connection.settings_dict
    name = f"readyz_{uuid.uuid4().hex[:12]}"
    server = {
        "host": settings["HOST"] or None,
        "port": settings["PORT"] or None,
        "user": settings["USER"],
        "dbname": "postgres",
    }
    with psycopg.connect(**server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(**server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.django_db
def test_readyz_is_503_while_migrations_are_not_applied(empty_database):
    url = child_database_url().rsplit("/", 1)[0] + f"/{empty_database}"

    status, _, body = readyz_with(DATABASE_URL=url)

    assert status == 503
    assert body["checks"] == {"database": "migrations pending", "redis": "ok"}
