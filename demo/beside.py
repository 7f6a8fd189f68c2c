"""The demo running on a PORT, as the commands beside it find it (`make story`, `audit`, ...).

While it runs, `make demo` publishes itself in ``.var/demos/<PORT>.json``: the
runner's pid and the environment its servers run with (database, Redis, ports,
payment provider and its keys). A command run beside it with the same PORT
runs in that very environment, so it reads the books of the demo that is
running, whichever provider that demo has. With no demo on that PORT it says
so in one line, with the command that starts one, instead of opening another
demo's books or asking a provider nobody runs. `make cluster` publishes
itself in its own state.json (demo/cluster/runner.py); a cluster on that PORT
is found the same way.

    python -m demo.beside -- python manage.py audit
    python -m demo.beside --or-embedded -- python manage.py shell   # a demo if one runs
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from config.embedded import VAR_ROOT

DEMOS_DIR = VAR_ROOT / "demos"
CLUSTER_STATE = VAR_ROOT / "cluster" / "state.json"
# What a command beside the demo needs of the demo's environment to reach the same
# services, in the same profile, with the same provider. Secrets among them are the
# demo's own (development defaults unless the person set theirs): the file is 0600.
SHARED_ENV = (
    "DEMO_MODE",
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "CELERY_QUEUE",
    "ONCESHOP_VAR_DIR",
    "PORT",
    "PROVIDER_PORT",
    "SHOP_BASE_URL",
    "PROVIDER_BASE_URL",
    "PROVIDER_API_KEY",
    "SANDBOX_WEBHOOK_SECRET",
    "PAYMENT_PROVIDER",
    "STRIPE_API_BASE",
    "STRIPE_API_KEY",
    "STRIPE_WEBHOOK_SECRET",
)
# The exit status of a command that found no demo to run beside (audit's 1 means
# "problems found", 3 "a person holds them").
NO_DEMO = 2


def demo_file(port: str) -> Path:
    return DEMOS_DIR / f"{port}.json"


def start_time(pid: int) -> str | None:
    """When ``pid`` started (field 22 of /proc/PID/stat); None if it is gone.

    With the pid it names one process, even after the number is reused. Where
    there is no /proc, only whether the pid is alive can be known: "alive".
    """
    stat = Path(f"/proc/{pid}/stat")
    if not Path("/proc/self/stat").exists():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "alive"
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def publish(*, port: str, env: dict[str, str]) -> Path:
    """Announce this process as the demo on ``port``, with its environment."""
    DEMOS_DIR.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    shared = {name: env[name] for name in SHARED_ENV if env.get(name)}
    text = json.dumps({"pid": pid, "started": start_time(pid), "env": shared}, indent=2)
    path = demo_file(port)
    partial = path.with_suffix(".tmp")
    # Renamed into place, readable by its owner only: a reader never sees half a file.
    partial.touch(mode=0o600)
    partial.write_text(text + "\n")
    partial.replace(path)
    return path


def withdraw(*, port: str) -> None:
    """This demo stops: its file goes, unless another process has published since."""
    path = demo_file(port)
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
        if json.loads(path.read_text())["pid"] == os.getpid():
            path.unlink()


def read(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def live(pid: object, started: object) -> bool:
    return isinstance(pid, int) and start_time(pid) in (started, "alive")


def cluster_running() -> dict[str, str] | None:
    """The environment of the cluster running from here (any PORT); None if there is none."""
    cluster = read(CLUSTER_STATE)
    if cluster is None or not isinstance(cluster.get("env"), dict):
        return None
    pids = [pid for node in cluster.get("nodes", []) for pid in node.get("pids", [])]
    if any(start_time(pid) for pid in pids if isinstance(pid, int)):
        return dict(cluster["env"])
    return None


def running(port: str) -> dict[str, str] | None:
    """The environment of the demo or cluster running on ``port``; None if there is none.

    A demo killed before it could withdraw leaves its file: its pid is gone (or
    now names another process, started at another time), so it is not running.
    """
    demo = read(demo_file(port))
    if demo is not None and live(demo.get("pid"), demo.get("started")):
        return dict(demo.get("env") or {})
    cluster = cluster_running()
    return cluster if cluster is not None and str(cluster.get("PORT")) == port else None


def _start_command(port: str, provider: str | None) -> str:
    variables = [] if port == "8000" else [f"PORT={port}"]
    arguments = [f"PAYMENT_PROVIDER={provider}"] if provider else []
    return " ".join([*variables, "make demo", *arguments])


def no_demo_line(port: str) -> str:
    provider = os.environ.get("PAYMENT_PROVIDER") or None
    return (
        f"No demo is running on PORT {port} (http://127.0.0.1:{port}/): start one with "
        f"`{_start_command(port, provider)}`, then run this again with the same PORT."
    )


def wrong_provider_line(port: str, runs: str, asked: str) -> str:
    return (
        f"The demo on PORT {port} runs the {runs} provider, not PAYMENT_PROVIDER={asked}: "
        f"leave PAYMENT_PROVIDER out to use it, or start `{_start_command('…', asked)}` "
        "on another PORT."
    )


def beside(command: list[str], *, or_embedded: bool) -> int:
    port = os.environ.get("PORT") or "8000"
    env = running(port)
    if env is None:
        if or_embedded:
            from config.embedded import run

            return run(command)
        print(no_demo_line(port), file=sys.stderr)
        return NO_DEMO
    runs = env.get("PAYMENT_PROVIDER") or "sandbox"
    asked = os.environ.get("PAYMENT_PROVIDER")
    if asked and asked != runs:
        print(wrong_provider_line(port, runs, asked), file=sys.stderr)
        return NO_DEMO
    os.execvpe(command[0], command, {**os.environ, **env})  # noqa: S606  # the demo's own command


def main(argv: list[str]) -> int:
    or_embedded = bool(argv) and argv[0] == "--or-embedded"
    if or_embedded:
        argv = argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: python -m demo.beside [--or-embedded] -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    return beside(argv, or_embedded=or_embedded)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
