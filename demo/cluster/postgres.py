"""A PostgreSQL primary and its streaming replica (hot standby), each a real server.

Built with the distribution's own tools (initdb, pg_basebackup) in a directory of
the caller's: ``make cluster`` keeps them under ``.var/cluster/`` and reuses them;
the tests build a pair in a temporary directory. PostgreSQL refuses to run as
root, so as root the servers run as the ``postgres`` user, which owns their files.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

# How long a server may take to accept connections after its start: initdb'd
# servers start in well under a second; a noisy shared machine can be slow.
READY_TIMEOUT_S = 60.0
# Fast shutdown (SIGINT) aborts open transactions and checkpoints; past this long the
# server is killed. Crash recovery on the next start is what PostgreSQL is built for.
STOP_GRACE_S = 20.0
SUPERUSER = "postgres"


def pg_binary(name: str) -> str:
    """The PostgreSQL tool ``name``: the newest server's bin directory, else PATH."""
    for directory in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(name)
    return found


def run_as() -> dict[str, Any]:
    """``subprocess`` arguments that drop root to the ``postgres`` user (else nothing)."""
    if os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam(SUPERUSER)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def give_to_server_user(path: Path) -> None:
    """Create ``path`` for the server's user, who must also be able to reach it."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        for parent in path.resolve().parents:
            # Search permission only (o+x), so the postgres user can walk down to it.
            mode = parent.stat().st_mode
            if not mode & 0o001:
                os.chmod(parent, mode | 0o001)
        entry = pwd.getpwnam(SUPERUSER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _tool(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, check=False, **run_as())
    if done.returncode != 0:
        said = " ".join(done.stderr.decode(errors="replace").split())
        raise RuntimeError(f"{os.path.basename(argv[0])} failed: {said}")


@dataclass
class Server:
    """One PostgreSQL server (``postgres -D``), a child of this process.

    Its port, and whatever else ``options`` holds, is given on the command line at
    every start, where it overrides the data directory's files: a directory built by
    an earlier run on other ports starts on this run's.
    """

    name: str
    data_dir: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    options: list[str] = field(default_factory=list)
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.data_dir.parent / f"{self.name}.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgres://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    pg_binary("postgres"),
                    *("-D", str(self.data_dir), "-p", str(self.port), *self.options),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **run_as(),
            )
        self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{self.what} exited: {self.last_fatal()}; see {self.log}")
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError as error:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{self.what} accepted no connection within {READY_TIMEOUT_S:.0f} s; "
                        f"see {self.log}"
                    ) from error
                time.sleep(0.1)  # no readiness signal beyond accepting a connection

    @property
    def what(self) -> str:
        """The server in a person's words, for a message about it."""
        return f"the {self.name} (PostgreSQL on 127.0.0.1:{self.port})"

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, 9 if kill else 2)
        try:
            self.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, 9)
            self.process.wait(timeout=5)

    def last_fatal(self) -> str:
        """Why the server's last start stopped, in its log's own words.

        Its FATAL line, after the first thing it could not do when that came first:
        "could not create any TCP/IP sockets" alone does not say the port was taken.
        """
        with contextlib.suppress(OSError):
            lines = self.log.read_text(errors="replace").splitlines()
            starts = [i for i, line in enumerate(lines) if "starting PostgreSQL" in line]
            last_run = lines[starts[-1] if starts else 0 :]
            said = [
                line.split(": ", 1)[1].strip()
                for line in last_run
                if ("FATAL:" in line or "could not" in line) and ": " in line
            ]
            fatal = [line.split("FATAL:", 1)[1].strip() for line in last_run if "FATAL:" in line]
            if fatal:
                first = said[0] if said else fatal[-1]
                return first if first == fatal[-1] else f"{first} ({fatal[-1]})"
        return "no reason in its log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            cursor = conn.execute(statement.encode(), params)
            return cursor.fetchall() if cursor.description else []


def _settings(socket_dir: Path, *, durable: bool) -> str:
    # No port here: each start gives it (Server.options).
    lines = [
        "listen_addresses = '127.0.0.1'",
        f"unix_socket_directories = '{socket_dir}'",
        "wal_level = replica",
        "max_wal_senders = 5",
        "hot_standby = on",
        # A standby reports what it still reads, so the primary keeps the rows its
        # queries need instead of cancelling them.
        "hot_standby_feedback = on",
        "max_connections = 200",
        "shared_buffers = 64MB",
    ]
    if not durable:
        # Tests only: a crash of a test's throwaway server loses nothing of value.
        lines += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
    return "\n".join(lines) + "\n"


@dataclass
class Pair:
    primary: Server
    replica: Server

    def stop(self) -> None:
        self.replica.stop()
        self.primary.stop()

    def set_apply_delay(self, delay_ms: int) -> None:
        """Delay the replica's replay of each commit (``recovery_min_apply_delay``)."""
        self.replica.sql(f"ALTER SYSTEM SET recovery_min_apply_delay = '{int(delay_ms)}ms'")
        self.replica.sql("SELECT pg_reload_conf()")

    def wait_caught_up(self, timeout_s: float = 30.0) -> None:
        """Until the replica has replayed everything the primary wrote so far."""
        # The insert position, not the write one: with asynchronous commit a commit
        # may still sit in the WAL buffers, past what has been written.
        (target,) = self.primary.sql("SELECT pg_current_wal_insert_lsn()::text")[0]
        deadline = time.monotonic() + timeout_s
        while True:
            (done,) = self.replica.sql("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,))[
                0
            ]
            if done:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("the replica did not catch up")
            time.sleep(0.05)  # replay progress has no notification to wait on


def start_pair(root: Path, *, primary_port: int, replica_port: int, durable: bool) -> Pair:
    """Start (building on first use) a primary and its hot standby under ``root``.

    If either does not start, the one that did is stopped before the error goes on.
    """
    give_to_server_user(root)
    primary = Server("primary", root / "primary", primary_port)
    # Where the standby streams from, on the command line like its port: the one
    # pg_basebackup wrote into its files names the primary's port of that day.
    conninfo = f"host=127.0.0.1 port={primary_port} user={SUPERUSER} application_name=replica"
    replica = Server(
        "replica", root / "replica", replica_port, options=["-c", f"primary_conninfo={conninfo}"]
    )
    pair = Pair(primary, replica)
    try:
        _build_and_start(root, pair, durable=durable)
    except BaseException:
        pair.stop()
        raise
    return pair


def _build_and_start(root: Path, pair: Pair, *, durable: bool) -> None:
    primary, replica = pair.primary, pair.replica
    if not (primary.data_dir / "PG_VERSION").exists():
        shutil.rmtree(primary.data_dir, ignore_errors=True)
        shutil.rmtree(replica.data_dir, ignore_errors=True)
        give_to_server_user(primary.data_dir)
        _tool(
            pg_binary("initdb"),
            "-D", str(primary.data_dir),
            "-U", SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-instructions",
        )  # fmt: skip
        with (primary.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(_settings(root, durable=durable))
        with (primary.data_dir / "pg_hba.conf").open("a") as hba:
            # Loopback only; the replica streams WAL over a replication connection.
            hba.write("host replication all 127.0.0.1/32 trust\n")
    primary.start()
    if not (replica.data_dir / "PG_VERSION").exists():
        shutil.rmtree(replica.data_dir, ignore_errors=True)
        # -R writes standby.signal and primary_conninfo: it starts as a hot standby.
        _tool(
            pg_binary("pg_basebackup"),
            "-h", "127.0.0.1",
            "-p", str(primary.port),
            "-U", SUPERUSER,
            "-D", str(replica.data_dir),
            "-R", "-X", "stream", "-c", "fast",
        )  # fmt: skip
    replica.start()
