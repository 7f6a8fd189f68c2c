"""`make demo`: migrate, seed, then run web + worker + beat until Ctrl-C.

Run under ``config.embedded`` so DATABASE_URL / REDIS_URL point at real
services. Ctrl-C (or SIGTERM) stops every child and waits for it: nothing is
left running.

The worker is supervised: its pid is written to ``<var>/worker.pid`` and, if it
dies (the chaos panel's "kill the worker" SIGKILLs it), it is started again.
What it was running was never acknowledged (``acks_late``), so the broker hands
that message out again and the task, written to be safe twice, runs again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from config.embedded import VAR_DIR
from config.production import DEVELOPMENT_STRIPE_API_KEY, DEVELOPMENT_STRIPE_WEBHOOK_SECRET
from demo import beside

PORT = os.environ.get("PORT", "8000")
# The provider gets its own server, as a third party would have: if the shop called
# /sandbox on its own server, enough concurrent pays would fill every thread with a
# request waiting for a free thread to answer it, until each timed out.
PROVIDER_PORT = os.environ.get("PROVIDER_PORT", str(int(PORT) + 1))
# Where the supervisor publishes the worker's pid (and process group) for the chaos
# panel. Under the var dir, so two demos with their own ONCESHOP_VAR_DIR never meet.
WORKER_PIDFILE = VAR_DIR / "worker.pid"
# A worker that keeps dying right after its start is not restarted in a tight loop:
# the wait doubles from the first value up to the cap, and resets once a worker has
# stayed up for STABLE_AFTER_S.
RESTART_BACKOFF_FIRST_S = 1.0
RESTART_BACKOFF_CAP_S = 30.0
STABLE_AFTER_S = 60.0
# Ctrl-C gives every child this long to finish what it is doing (gunicorn drains
# requests, celery a warm shutdown) before its whole process group is killed.
STOP_GRACE_S = 15.0
# Celery warns at length when its worker runs as root, which a demo in a container
# or a VM often does and the person running it cannot change: said once, by us.
QUIET_WORKER = {"PYTHONWARNINGS": "ignore:You're running the worker with superuser privileges"}
# The worker's counters are served on their own port (docs/operating.md).
WORKER_METRICS_PORT = os.environ.get("CELERY_METRICS_PORT", str(int(PORT) + 2))
# One multiprocess metrics directory per process family, each emptied when it starts.
METRICS_DIR = VAR_DIR / "metrics"


# What `make demo` writes on its database (a comment on it, PostgreSQL's own place for a
# word about a database): which provider's demo the books there belong to.
DATABASE_MARK = "OnceShop demo, payment provider: "


def database_claim(url: str, provider: str) -> str | None:
    """Mark the database at ``url`` as ``provider``'s demo's; the other provider it holds, if any.

    The embedded servers keep one database per provider (config/embedded.py); a
    database given by DATABASE_URL serves whichever demo starts on it, and a demo of
    another provider there would find payments its provider never made. A
    database already commented on by someone else, or whose comment we may not
    set, is left as it is.
    """
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as connection:
        name, comment = connection.execute(
            "SELECT datname, shobj_description(oid, 'pg_database') FROM pg_database"
            " WHERE datname = current_database()"
        ).fetchone() or ("", None)
        if comment is None:
            with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
                connection.execute(
                    sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                        sql.Identifier(name), sql.Literal(DATABASE_MARK + provider)
                    )
                )
            return None
        held = comment.removeprefix(DATABASE_MARK) if comment.startswith(DATABASE_MARK) else None
        return held if held not in (None, provider) else None


# `manage.py migrate --no-input -v 0`, then `manage.py seed_demo`, in one process: each
# Python process that sets Django up pays for its imports again (seconds on two cores).
_MIGRATE_AND_SEED = """
import os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django
django.setup()
from django.core.management import call_command
call_command("migrate", interactive=False, verbosity=0)
call_command("seed_demo")
"""


def _prepare() -> None:
    """Migrate, collect the static files, seed.

    collectstatic reads and writes files only, never the database, so it runs beside
    the other two: on a fresh clone, the seconds before the first page are what a
    newcomer waits through. The seed needs the migrated tables.
    """
    collect = [sys.executable, "manage.py", "collectstatic", "--no-input", "-v", "0"]
    collecting = subprocess.Popen(collect)
    try:
        subprocess.run([sys.executable, "-c", _MIGRATE_AND_SEED], check=True)
    finally:
        if collecting.wait() != 0:
            raise subprocess.CalledProcessError(collecting.returncode, collect)


@dataclass
class Child:
    """One supervised command, started as the leader of its own process group.

    Its own group (a new session) so that stopping it, or the chaos panel killing
    the worker, reaches every process it forked (gunicorn's workers, celery's pool)
    and leaves no orphan behind.
    """

    name: str
    argv: list[str]
    restart: bool = False
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff_s: float = RESTART_BACKOFF_FIRST_S
    restart_at: float | None = None
    pidfile: Path | None = None
    # Plays the provider: serves /sandbox/ and runs its tasks (SANDBOX_ENABLED).
    provider: bool = False
    env: dict[str, str] = field(default_factory=dict)

    def start(self) -> None:
        sandbox = {"SANDBOX_ENABLED": "true" if self.provider else "false"}
        env = {**os.environ, **sandbox, **self.env}
        self.process = subprocess.Popen(self.argv, start_new_session=True, env=env)
        self.started_at = time.monotonic()
        self.restart_at = None
        if self.pidfile is not None:
            _write_pidfile(self.pidfile, self.process.pid)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal_group(self, signum: int) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)


def _write_pidfile(path: Path, pid: int) -> None:
    # Written to a temporary name and renamed: a reader never sees half a number.
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(f"{pid}\n")
    partial.replace(path)


def _gunicorn(bin_dir: str, port: str) -> list[str]:
    # gthread: threads, so a slow provider call blocks one thread, not a worker.
    return [
        os.path.join(bin_dir, "gunicorn"),
        "config.wsgi:application",
        "--config",
        "python:config.gunicorn",
        "--bind",
        f"127.0.0.1:{port}",
        "--worker-class",
        "gthread",
        "--workers",
        "2",
        "--threads",
        "8",
        "--timeout",
        "60",
        # Both servers would otherwise open the same control socket (~/.gunicorn/
        # gunicorn.ctl) and warn about it; the supervisor steers them by signals.
        "--no-control-socket",
    ]


def _metrics_dir(family: str) -> dict[str, str]:
    return {"PROMETHEUS_MULTIPROC_DIR": str(METRICS_DIR / family)}


# `make demo PAYMENT_PROVIDER=stripe`: the same shop against localstripe (a Stripe
# emulator, installed for this demo alone: requirements-demo-stripe.lock) on
# PROVIDER_PORT instead of the sandbox, through the official SDK; localstripe signs
# its webhooks with this secret and sends them to the shop's Stripe endpoint
# (docs/providers.md).
WITH_STRIPE = os.environ.get("PAYMENT_PROVIDER", "sandbox") == "stripe"
DEMO_STRIPE = {
    "STRIPE_API_BASE": f"http://127.0.0.1:{PROVIDER_PORT}",
    "STRIPE_API_KEY": DEVELOPMENT_STRIPE_API_KEY,
    "STRIPE_WEBHOOK_SECRET": DEVELOPMENT_STRIPE_WEBHOOK_SECRET,
}
STRIPE_STARTUP_S = 30.0


def _provider(bin_dir: str) -> Child:
    if WITH_STRIPE:
        # On loopback, its objects in the Stripe demo's state directory beside its
        # database (demo/stripe_emulator.py).
        state = VAR_DIR / "localstripe.pickle"
        return Child(
            "localstripe",
            [
                sys.executable,
                "-m",
                "demo.stripe_emulator",
                "--port",
                PROVIDER_PORT,
                "--state",
                str(state),
            ],
        )
    # Serves only the sandbox and its admin (demo/provider_urls.py), not the shop.
    return Child(
        "provider",
        _gunicorn(bin_dir, PROVIDER_PORT),
        provider=True,
        env={"SANDBOX_ONLY": "true", **_metrics_dir("provider")},
    )


def _register_stripe_webhook() -> None:
    """Tell localstripe where the shop's webhook endpoint is, once it listens."""
    import requests

    deadline = time.monotonic() + STRIPE_STARTUP_S
    while True:
        try:
            response = requests.post(
                f"{DEMO_STRIPE['STRIPE_API_BASE']}/_config/webhooks/onceshop",
                data={
                    "url": f"http://127.0.0.1:{PORT}/api/v1/callbacks/stripe/",
                    "secret": os.environ["STRIPE_WEBHOOK_SECRET"],
                },
                timeout=2,
            )
            response.raise_for_status()
            return
        except requests.RequestException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # localstripe has no readiness signal: ask again


def provider_note() -> str:
    """The banner's lines about the provider: where it is, and what a person can do there."""
    if not WITH_STRIPE:
        return f"Its payment provider (the sandbox): http://127.0.0.1:{PROVIDER_PORT}/sandbox/"
    # localstripe has no pages: its root answers a browser with a 401 in JSON. Its API
    # takes any test key, so the command that lists what it holds is what to give.
    api = f"http://127.0.0.1:{PROVIDER_PORT}"
    return (
        f"Its payment provider: Stripe, emulated by localstripe at {api} (an API, no pages)."
        f"\nWhat it holds: curl -s -u {DEMO_STRIPE['STRIPE_API_KEY']}: {api}/v1/payment_intents"
    )


def _children(bin_dir: str) -> list[Child]:
    return [
        Child("web", _gunicorn(bin_dir, PORT), env=_metrics_dir("web")),
        _provider(bin_dir),
        Child(
            "worker",
            [
                os.path.join(bin_dir, "celery"),
                "-A",
                "config.celery:app",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                "2",
            ],
            restart=True,
            pidfile=WORKER_PIDFILE,
            # One worker for both companies here: it delivers the sandbox's notifications.
            provider=True,
            env={
                **QUIET_WORKER,
                **_metrics_dir("worker"),
                "CELERY_METRICS_PORT": WORKER_METRICS_PORT,
            },
        ),
        Child(
            "beat",
            [
                os.path.join(bin_dir, "celery"),
                "-A",
                "config.celery:app",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(VAR_DIR / "celerybeat-schedule"),
            ],
        ),
    ]


def _supervise(children: list[Child], stopping: list[bool]) -> str:
    """Watch the children until Ctrl-C or a child that is not restarted dies.

    Returns why it stopped, for the log line.
    """
    while not stopping:
        now = time.monotonic()
        for child in children:
            if child.alive:
                if now - child.started_at > STABLE_AFTER_S:
                    child.backoff_s = RESTART_BACKOFF_FIRST_S
                continue
            if not child.restart:
                code = child.process.returncode if child.process else None
                return f"{child.name} exited with {code}"
            if child.restart_at is None:
                assert child.process is not None
                code = child.process.returncode
                # A SIGKILL of the leader can leave its pool processes running: the
                # group goes too, so a restart never runs beside an orphaned pool.
                child.signal_group(signal.SIGKILL)
                child.restart_at = now + child.backoff_s
                print(
                    f"[demo] {child.name} died ({_describe(code)}); restarting in "
                    f"{child.backoff_s:.0f} s",
                    flush=True,
                )
                child.backoff_s = min(child.backoff_s * 2, RESTART_BACKOFF_CAP_S)
            elif now >= child.restart_at:
                child.start()
                assert child.process is not None
                print(f"[demo] {child.name} restarted, pid {child.process.pid}", flush=True)
        time.sleep(0.2)
    return "stop requested"


def _describe(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _stop(children: list[Child]) -> None:
    for child in children:
        if child.alive:
            child.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for child in children:
        if child.process is None:
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        # Whatever is left in the group (a slow gunicorn worker, a pool process whose
        # leader already exited) is killed, so Ctrl-C really leaves nothing running.
        child.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.process.wait(timeout=5)
        if child.pidfile is not None:
            child.pidfile.unlink(missing_ok=True)


def _refusal() -> str | None:
    """Why this demo must not start, in one line; None when it may."""
    if beside.running(PORT) is not None:
        return f"A demo is already running on PORT {PORT}: use it, or start this one elsewhere."
    provider = os.environ["PAYMENT_PROVIDER"]
    held = database_claim(os.environ["DATABASE_URL"], provider)
    if held is not None:
        return (
            f"The database at DATABASE_URL holds the {held} demo's books; the {provider} demo "
            "needs its own: point DATABASE_URL (and REDIS_URL) at others, or unset both and "
            "the embedded servers keep one per provider under .var/."
        )
    return None


def main() -> int:
    os.environ.setdefault("DEMO_MODE", "true")
    # Said out loud, so the commands beside this demo take the same one (demo/beside.py).
    os.environ.setdefault("PAYMENT_PROVIDER", "sandbox")
    # The settings derive SHOP_BASE_URL and PROVIDER_BASE_URL from these two.
    os.environ["PORT"], os.environ["PROVIDER_PORT"] = PORT, PROVIDER_PORT
    refused = _refusal()
    if refused is not None:
        print(f"[demo] {refused}", file=sys.stderr, flush=True)
        return 2
    # A console a person reads: plain lines (still with the request id); LOG_FORMAT=json
    # shows what production writes.
    os.environ.setdefault("LOG_FORMAT", "plain")
    # The demo has one staff user: its refunds and accepts on the desk need no second
    # person (a deployment keeps DESK_APPROVAL_ABOVE's default, 0: every one does).
    os.environ.setdefault("DESK_APPROVAL_ABOVE", str(10**12))
    if WITH_STRIPE:
        for name, value in DEMO_STRIPE.items():
            os.environ.setdefault(name, value)
    _prepare()

    stopping: list[bool] = []  # a list, so the signal handler can set it

    def stop(_signum: int, _frame: object) -> None:
        stopping.append(True)

    # Installed before any child starts: a Ctrl-C during start-up still stops them all.
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    children = _children(os.path.dirname(sys.executable))
    try:
        for child in children:
            child.start()
        if WITH_STRIPE:
            _register_stripe_webhook()
        # `make story`, `audit`, `reconcile` and `shell` find this demo by its PORT.
        beside.publish(port=PORT, env=dict(os.environ))
        print(
            f"\nOnceShop is running on http://127.0.0.1:{PORT}/  (Ctrl-C stops everything)"
            f"\n{provider_note()}\n",
            flush=True,
        )
        reason = _supervise(children, stopping)
        print(f"[demo] stopping: {reason}", flush=True)
    finally:
        beside.withdraw(port=PORT)
        _stop(children)
    # Stopped on request: success. A child that died on its own is a failure.
    return 0 if stopping else 1


if __name__ == "__main__":
    sys.exit(main())
