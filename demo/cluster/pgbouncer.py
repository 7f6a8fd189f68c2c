"""PgBouncer in transaction pooling, configured the way OnceShop needs it.

``pool_mode = transaction``: a server connection serves one client for one
transaction, then the next client. The session settings OnceShop would send at
connect time cannot travel that way (config/databases.py), so the one it needs,
``lock_timeout``, is the pooler's ``connect_query``: every server connection it
opens runs it before any client uses the connection.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from demo.cluster.postgres import SUPERUSER, give_to_server_user, run_as

PGBOUNCER = "/usr/sbin/pgbouncer"
READY_TIMEOUT_S = 30.0
# Per (database, user) pair. Twenty server connections feed all the web nodes'
# threads: in transaction mode a connection is busy only while a transaction runs.
DEFAULT_POOL_SIZE = 20


@dataclass
class Target:
    """One [databases] entry: a name clients use, and the server it stands for."""

    name: str
    port: int
    dbname: str | None = None  # None: the name the client asked for (for the "*" entry)


@dataclass
class PgBouncer:
    work_dir: Path
    port: int
    targets: list[Target]
    lock_timeout_ms: int
    pool_size: int = DEFAULT_POOL_SIZE
    process: subprocess.Popen[bytes] | None = None

    @property
    def ini(self) -> Path:
        return self.work_dir / "pgbouncer.ini"

    def url(self, database: str) -> str:
        return f"postgres://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def write_config(self) -> None:
        give_to_server_user(self.work_dir)
        userlist = self.work_dir / "userlist.txt"
        userlist.write_text(f'"{SUPERUSER}" ""\n')
        connect_query = f"SET lock_timeout = {int(self.lock_timeout_ms)}"
        lines = ["[databases]"]
        for target in self.targets:
            dbname = f" dbname={target.dbname}" if target.dbname else ""
            lines.append(
                f"{target.name} = host=127.0.0.1 port={target.port}{dbname} "
                f"connect_query='{connect_query}'"
            )
        lines += [
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {userlist}",
            "pool_mode = transaction",
            f"default_pool_size = {self.pool_size}",
            "max_client_conn = 1000",
            # A client that sends a startup parameter PgBouncer does not know is
            # refused, not silently stripped: the app must not rely on `options`.
            "ignore_startup_parameters =",
            f"admin_users = {SUPERUSER}",
            f"logfile = {self.work_dir / 'pgbouncer.log'}",
            f"pidfile = {self.work_dir / 'pgbouncer.pid'}",
        ]
        self.ini.write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        self.write_config()
        (self.work_dir / "pgbouncer.pid").unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [PGBOUNCER, "-q", str(self.ini)],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            **run_as(),
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited; see {self.work_dir / 'pgbouncer.log'}")
            try:
                # The admin console answers without reaching any server.
                psycopg.connect(self.url("pgbouncer"), autocommit=True, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # no readiness signal beyond accepting a connection

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGINT)  # "safe shutdown": waits for clients
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None
