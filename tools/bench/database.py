"""The bench's own database, never the demo's or the tests': ``onceshop_bench`` on
the server DATABASE_URL names (a TCP URL or the embedded server's Unix socket),
recreated on every run and migrated with ``manage.py migrate`` like a deployment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import unquote, urlsplit

import psycopg

from tools.bench import ROOT

# BENCH_DATABASE picks another name: two checkouts benching against one server.
BENCH_DATABASE = os.environ.get("BENCH_DATABASE") or "onceshop_bench"
# Migrating an empty database takes seconds; this only stops a hung server from
# stalling the run forever.
MIGRATE_TIMEOUT_S = 300

# Schemes dj-database-url accepts for PostgreSQL; libpq (psycopg, pgbench) only
# knows the first two.
_POSTGRES_SCHEMES = {"postgres", "postgresql", "pgsql"}


def with_database(url: str, name: str) -> str:
    """``url`` with its database name replaced; host, socket, user and options kept."""
    parts = urlsplit(url)
    if parts.scheme not in _POSTGRES_SCHEMES:
        raise ValueError(f"not a PostgreSQL URL: {parts.scheme}://...")
    return parts._replace(path=f"/{name}").geturl()


def database_name(url: str) -> str:
    return unquote(urlsplit(url).path.lstrip("/"))


def libpq_uri(url: str) -> str:
    """The URL as libpq understands it (``postgresql://``; the socket dir stays percent-encoded)."""
    return urlsplit(url)._replace(scheme="postgresql").geturl()


def maintenance_url(url: str, name: str = BENCH_DATABASE) -> str:
    """Where to connect to drop and create database ``name`` (never ``name`` itself)."""
    return with_database(url, "postgres") if database_name(url) == name else url


def drop(server_url: str, name: str = BENCH_DATABASE) -> None:
    """Drop database ``name`` on ``server_url``'s server, if it is there."""
    with psycopg.connect(libpq_uri(maintenance_url(server_url, name)), autocommit=True) as conn:
        # FORCE: a gunicorn left over from an interrupted run must not block the drop.
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def recreate(server_url: str, name: str = BENCH_DATABASE) -> str:
    """Drop and create database ``name`` (the bench's, or the lab's) on ``server_url``'s
    server; return its URL."""
    drop(server_url, name)
    with psycopg.connect(libpq_uri(maintenance_url(server_url, name)), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(server_url, name)


def migrate(bench_url: str) -> None:
    """Run ``manage.py migrate`` against the bench (or lab) database."""
    env = {**os.environ, "DATABASE_URL": bench_url}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=MIGRATE_TIMEOUT_S,
    )


def server_version(url: str) -> str:
    """The server's ``version()`` string, for the report."""
    with psycopg.connect(libpq_uri(url)) as conn:
        row = conn.execute("SELECT version()").fetchone()
    return str(row[0]) if row else "unknown"
