"""The second hour, run for real: `make walk` (docs/operating.md, "The newcomer's walk").

What a curious newcomer does after the first `make demo`, each step the `make`
command a person types, Ctrl-C being SIGINT to its process group:

1. `make demo`, and the API tour (docs/api.md) pasted against it;
2. `make demo PAYMENT_PROVIDER=stripe`, a payment and a refund, `make audit` and
   `make story` beside it;
3. `make demo` again, then the Stripe demo again: `make audit` and the books
   page are clean in each;
4. `make audit` with no demo on its PORT: one line, exit 2;
5. `make cluster` on one PORT, then on another, `make audit` beside each.

In a state directory of its own (a fresh clone's `.var/`), with DATABASE_URL
and REDIS_URL unset as on a newcomer's machine (the cluster keeps REDIS_URL, the
machine's Redis it needs), so a person's own demos are never touched. It ends
by listing every process left running that names its directory or its ports,
and fails if any step went wrong, a log holds a traceback, or a process is left.

    python -m tools.walk [--port 28300] [--keep] [--no-cluster]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]
# What a newcomer's shell does not have: the demo starts its own servers.
NOT_ON_A_NEW_MACHINE = (
    "DATABASE_URL",
    "REDIS_URL",
    "PAYMENT_PROVIDER",
    "DJANGO_SETTINGS_MODULE",
    "SHOP_BASE_URL",
    "PROVIDER_BASE_URL",
    # `make walk` runs the walk under make: the person's own make is a top-level one.
    "MAKELEVEL",
    "MAKEFLAGS",
    "MFLAGS",
)
# From nothing: initdb, migrate, collectstatic, seed, three servers, on a busy machine.
START_S = 600.0
STOP_S = 90.0
README_URL = "http://127.0.0.1:8000"
# Below Linux's ephemeral range (32768-60999 by default): there, any process's outgoing
# connection may hold, as its local end, a port a demo is about to listen on.
DEFAULT_PORT = 28300
TOUR = "## A tour of the API"
BLOCK = re.compile(r"```(sh|text)\n(.*?)```", re.S)
# What make prints around a recipe: its command lines, and "make[1]: *** ... Error 2".
MAKES_OWN = re.compile(r"make(\[\d+\])?: \*\*\*|\.venv/|DEMO_MODE=")
ALICE = {"username": "alice", "password": "alice-pays-once"}
STAFF = {"username": "staff", "password": "staff-runs-the-shop"}


@dataclass
class Walk:
    var: Path
    logs: Path
    port: int
    started: float = field(default_factory=time.monotonic)
    problems: list[str] = field(default_factory=list)
    ports: set[int] = field(default_factory=set)

    def say(self, line: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f} s] {line}", flush=True)

    def check(self, ok: bool, what: str) -> None:
        self.say(("ok    " if ok else "WRONG ") + what)
        if not ok:
            self.problems.append(what)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in NOT_ON_A_NEW_MACHINE}
        return {**env, "ONCESHOP_VAR_DIR": str(self.var), **extra}

    def make(self, *words: str, **env: str) -> subprocess.CompletedProcess[str]:
        """One `make` command, to its end; what it printed is in the step's log."""
        done = subprocess.run(
            ["make", "--no-print-directory", *words],  # noqa: S607
            cwd=ROOT,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=START_S,
            check=False,
        )
        name = "-".join(word.replace("=", "_") for word in words)
        (self.logs / f"{name}.log").write_text(done.stdout + done.stderr)
        return done

    @contextlib.contextmanager
    def running(
        self, *words: str, ready: Callable[[], bool], log: str, **env: str
    ) -> Iterator[None]:
        """`make <words>` in the foreground of its own terminal, until Ctrl-C."""
        command = "make " + " ".join(words)
        path = self.logs / f"{log}.log"
        with path.open("ab") as output:
            process = subprocess.Popen(
                ["make", "--no-print-directory", *words],  # noqa: S607
                cwd=ROOT,
                env=self.env(**env),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        began = time.monotonic()
        try:
            while not ready():
                if process.poll() is not None:
                    raise RuntimeError(f"{command} exited with {process.returncode}; see {path}")
                if time.monotonic() - began > START_S:
                    raise RuntimeError(f"{command} not ready within {START_S:.0f} s; see {path}")
                time.sleep(1.0)  # a server has no readiness signal beyond answering
            self.say(f"ok    {command}: ready in {time.monotonic() - began:.1f} s")
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)  # Ctrl-C
            try:
                code = process.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                code = process.wait()
            said = path.read_text(errors="replace").rstrip().rsplit("\n", 1)[-1]
            self.check(
                ctrl_c_ended_well(code, said),
                f"{command}: Ctrl-C stopped it (exit {code}: {said!r})",
            )


def ctrl_c_ended_well(code: int, last_line: str) -> bool:
    """At a terminal, Ctrl-C ends make by SIGINT (the shell's 130) once its recipe has
    stopped, printing "*** [Makefile:N: demo] Interrupt" when the recipe ended by the
    signal too; "*** [...] Error N" is a recipe that failed on the way down, and any
    other signal is a kill."""
    failed = re.search(r"\*\*\* \[.*\] Error \d+$", last_line)
    return code == 0 or (code == -signal.SIGINT and not failed)


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


# --- the steps ------------------------------------------------------------------------------


def tour(walk: Walk, shop: str) -> None:
    """The API tour (docs/api.md), pasted block by block into one bash, each claim checked."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text[text.index(TOUR) :]
    blocks = BLOCK.findall(section[: section.index("\n## ", len(TOUR))])
    marker = "--- end of block ---"
    commands = [code.replace(README_URL, shop) for kind, code in blocks if kind == "sh"]
    script = "set -euo pipefail\n" + "".join(f"{code}\necho '{marker}'\n" for code in commands)
    done = subprocess.run(
        ["bash", "-c", script],  # noqa: S607
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    (walk.logs / "tour.log").write_text(done.stdout + done.stderr)
    outputs = iter(done.stdout.replace("\r", "").split(marker + "\n"))
    printed: list[str] = []
    claims = missing = 0
    for kind, code in blocks:
        if kind == "sh":
            printed = next(outputs, "").splitlines()
            continue
        for line in code.splitlines():
            pattern = re.compile(".*".join(re.escape(part) for part in line.split("…")))
            claims += 1
            if not any(pattern.fullmatch(out) for out in printed):
                missing += 1
                walk.say(f"      the tour claims {line!r}; it printed {printed[:3]}")
    walk.check(
        done.returncode == 0 and claims > 0 and missing == 0,
        f"the API tour: {claims - missing} of {claims} printed lines as claimed",
    )


def pay_and_refund(walk: Walk, shop: str) -> None:
    """A customer's order, paid and partly refunded, through the API."""
    token = requests.post(f"{shop}/api/v1/auth/token/", data=ALICE, timeout=30).json()["token"]
    auth = {"Authorization": f"Token {token}"}

    def post(path: str, body: dict[str, Any] | None = None) -> requests.Response:
        headers = {**auth, "Idempotency-Key": str(uuid.uuid4())}
        return requests.post(f"{shop}{path}", json=body, headers=headers, timeout=60)

    created = post("/api/v1/orders/", {"lines": [{"sku": "TEA-LONGJING", "quantity": 1}]})
    number = created.json()["number"]
    paid = post(f"/api/v1/orders/{number}/pay/")
    refunded = post(f"/api/v1/orders/{number}/refunds/", {"amount": 500, "reason": "a cup broke"})
    statuses = (created.status_code, paid.status_code, refunded.status_code)
    walk.check(
        statuses == (201, 200, 200) and refunded.json()["refunded_amount"] == 500,
        f"order {number}: created, paid, 5.00 refunded (HTTP {statuses})",
    )


def audit_beside(walk: Walk, port: int, where: str) -> None:
    done = walk.make("audit", f"PORT={port}")
    last = (done.stdout.strip().splitlines() or [""])[-1]
    walk.check(
        done.returncode == 0 and "Traceback" not in done.stderr,
        f"make audit PORT={port} beside {where}: exit {done.returncode}, {last!r}",
    )


def books_clean(walk: Walk, shop: str) -> None:
    """/books/ as the staff user: the audit's verdict on the page."""
    session = requests.Session()
    session.get(f"{shop}/login/", timeout=30)
    session.post(
        f"{shop}/login/",
        data={**STAFF, "csrfmiddlewaretoken": session.cookies.get("csrftoken", "")},
        headers={"Referer": f"{shop}/login/"},
        timeout=30,
    )
    page = session.get(f"{shop}/books/", timeout=120).text
    verdict = re.search(r'<p class="verdict[^"]*">(.*?)</p>', page, re.S)
    said = re.sub(r"<[^>]+>", "", verdict.group(1)).strip() if verdict else "no verdict"
    walk.check(said.startswith("Clean:"), f"/books/ says {said!r}")


def demo_ports(port: int) -> set[int]:
    """A demo's: the shop, its provider, its worker's metrics."""
    return {port, port + 1, port + 2}


def cluster_ports(port: int) -> set[int]:
    """A cluster's: HAProxy, the admin port, and its block from PORT + 10 to PORT + 31."""
    return {port, port + 1} | set(range(port + 10, port + 32))


def ports_in_use(ports: set[int]) -> list[int]:
    """The ports another process holds (listening, or as the local end of a connection)."""
    taken = []
    for port in sorted(ports):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                taken.append(port)
    return taken


def demo_twice_with_stripe_between(walk: Walk) -> None:
    port = walk.port
    walk.ports |= demo_ports(port)
    shop = f"http://127.0.0.1:{port}"
    home = lambda: answers(f"{shop}/")  # noqa: E731

    with walk.running("demo", f"PORT={port}", ready=home, log="demo-sandbox"):
        tour(walk, shop)

    with walk.running(
        "demo", f"PORT={port}", "PAYMENT_PROVIDER=stripe", ready=home, log="demo-stripe"
    ):
        pay_and_refund(walk, shop)
        audit_beside(walk, port, "the Stripe demo")
        story = walk.make("story", f"PORT={port}")
        said = [line for line in story.stderr.splitlines() if line.strip()]
        walk.check(
            story.returncode != 0 and "scripted faults" in story.stderr,
            f"make story beside the Stripe demo refuses, saying why: {said[:1]}",
        )
        audit_beside(walk, port, "the Stripe demo, after the story refused")

    with walk.running("demo", f"PORT={port}", ready=home, log="demo-sandbox-again"):
        audit_beside(walk, port, "the sandbox demo, back from Stripe")
        books_clean(walk, shop)

    with walk.running(
        "demo", f"PORT={port}", "PAYMENT_PROVIDER=stripe", ready=home, log="demo-stripe-again"
    ):
        audit_beside(walk, port, "the Stripe demo again (its emulator restarted)")
        books_clean(walk, shop)

    nobody = walk.make("audit", f"PORT={port}")
    said = [line for line in (nobody.stdout + nobody.stderr).splitlines() if line.strip()]
    # Less what make itself prints: the recipe's command line, and its "*** Error 2".
    said = [line for line in said if not MAKES_OWN.match(line)]
    walk.check(
        nobody.returncode != 0 and len(said) == 1 and said[0].startswith("No demo is running"),
        f"make audit PORT={port} with no demo: exit {nobody.returncode}, {said}",
    )


def cluster_twice(walk: Walk) -> None:
    state_file = walk.var / "cluster" / "state.json"
    for port in (walk.port + 100, walk.port + 200):
        walk.ports |= cluster_ports(port)
        # The cluster needs the machine's Redis: a newcomer's REDIS_URL, or its default.
        extra = {"REDIS_URL": os.environ["REDIS_URL"]} if os.environ.get("REDIS_URL") else {}

        def ready(port: int = port) -> bool:
            with contextlib.suppress(FileNotFoundError, ValueError):
                return json.loads(state_file.read_text())["url"].endswith(f":{port}")
            return False

        with walk.running("cluster", f"PORT={port}", ready=ready, log=f"cluster-{port}", **extra):
            state = json.loads(state_file.read_text())
            walk.check(
                state["primary"].startswith(f"postgres://postgres@127.0.0.1:{port + 30}/")
                and answers(f"http://127.0.0.1:{port}/healthz"),
                f"cluster on PORT={port}: its primary on {port + 30}, HAProxy answers",
            )
            audit_beside(walk, port, "the cluster")


# --- what is left ---------------------------------------------------------------------------


def _ancestors() -> set[int]:
    """The walk and what started it (`make walk WALK_ARGS="--port N"` names the port)."""
    found, pid = set(), os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: ppid
    return found


def leftovers(walk: Walk) -> list[str]:
    """Every process whose command line names the walk's directory or one of its ports."""
    names = [str(walk.var)] + [str(port) for port in sorted(walk.ports)]
    pattern = re.compile("|".join(rf"(?<![\d]){re.escape(name)}(?![\d])" for name in names))
    found = []
    ours = _ancestors()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in ours:
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if argv and pattern.search(argv):
                found.append(f"{entry.name} {argv.strip()[:160]}")
    return found


def tracebacks(walk: Walk) -> list[str]:
    return sorted(log.name for log in walk.logs.glob("*.log") if "Traceback" in log.read_text())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.walk")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"the demos' PORT (default {DEFAULT_PORT})"
    )
    parser.add_argument("--keep", action="store_true", help="keep the state directory")
    parser.add_argument("--no-cluster", action="store_true", help="leave `make cluster` out")
    args = parser.parse_args(argv)
    var = Path(tempfile.mkdtemp(prefix="onceshop-walk-"))
    logs = var / "logs"
    logs.mkdir()
    walk = Walk(var=var, logs=logs, port=args.port)
    walk.say(f"the walk's state directory (a fresh clone's .var/): {var}")
    planned = demo_ports(args.port)
    if not args.no_cluster:
        planned |= cluster_ports(args.port + 100) | cluster_ports(args.port + 200)
    taken = ports_in_use(planned)
    if taken:
        walk.check(False, f"ports in use before the walk began: {taken}; choose another --port")
        shutil.rmtree(var, ignore_errors=True)
        return 1
    try:
        demo_twice_with_stripe_between(walk)
        if not args.no_cluster:
            cluster_twice(walk)
    except (RuntimeError, requests.RequestException, KeyError, ValueError) as error:
        walk.check(False, f"the walk stopped: {error}")
    left = leftovers(walk)
    walk.check(left == [], f"processes left running: {left or 'none'}")
    logged = tracebacks(walk)
    walk.check(logged == [], f"logs with a traceback: {logged or 'none'}")
    walk.say(f"logs: {logs}" if args.keep or walk.problems else "done")
    if not args.keep and not walk.problems:
        shutil.rmtree(var, ignore_errors=True)
    if walk.problems:
        print(f"\nThe walk found {len(walk.problems)} problem(s):", *walk.problems, sep="\n  ")
        return 1
    print("\nThe walk ended well: every step as it should be, nothing left running.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
