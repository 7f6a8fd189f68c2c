"""The commands beside a demo (`make story`, `audit`, `reconcile`, `shell`) and the
demos' state: each provider's demo apart, and the demo on a PORT found by its PORT.

The make targets are run as a person types them; a running demo is stood in for
by this test's own process publishing itself (demo/beside.py), since what is
under test is how the commands find it, not the demo.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from demo import beside, runner
from tests.cluster.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
# Unset, as on a newcomer's machine: the commands must not need them to say no. A
# newcomer's make is a top-level one, even when these tests run under `make test`.
NOT_GIVEN = {
    "DATABASE_URL",
    "REDIS_URL",
    "PAYMENT_PROVIDER",
    "DJANGO_SETTINGS_MODULE",
    "MAKELEVEL",
    "MAKEFLAGS",
    "MFLAGS",
}


@pytest.fixture
def var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty state directory, for this process's demo/beside.py and the commands'."""
    root = tmp_path / "var"
    monkeypatch.setattr(beside, "DEMOS_DIR", root / "demos")
    monkeypatch.setattr(beside, "CLUSTER_STATE", root / "cluster" / "state.json")
    return root


def environment(var: Path, **extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in NOT_GIVEN}
    return {**env, "ONCESHOP_VAR_DIR": str(var), **extra}


def said(done: subprocess.CompletedProcess[str]) -> list[str]:
    """What the command said, without make's own closing "*** Error" line."""
    lines = (done.stdout + done.stderr).splitlines()
    return [line for line in lines if line.strip() and not line.startswith("make: ***")]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["audit", "reconcile", "story"])
def test_with_no_demo_on_the_port_each_command_says_so_in_one_line(target, var):
    port = str(free_port())

    done = subprocess.run(
        ["make", "-s", target, f"PORT={port}"],  # noqa: S607
        cwd=ROOT,
        env=environment(var),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode != 0
    assert said(done) == [beside.no_demo_line(port)]
    assert f"`PORT={port} make demo`" in said(done)[0]
    # Nothing was started to find that out: no embedded servers under the state dir.
    assert not (var / "pg").exists()


@pytest.fixture
def published(var: Path) -> Iterator[Any]:
    """Publish this process as the demo on a free PORT, with the given environment."""
    ports: list[str] = []

    def publish(**env: str) -> str:
        port = str(free_port())
        ports.append(port)
        beside.publish(port=port, env={"PORT": port, **env})
        return port

    yield publish
    for port in ports:
        beside.withdraw(port=port)


SHOW = "import os; print(os.environ['PAYMENT_PROVIDER'], os.environ['DATABASE_URL'])"


def run_beside(var: Path, port: str, *command: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "demo.beside", "--", *command],
        cwd=ROOT,
        env=environment(var, PORT=port, **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_command_beside_the_demo_runs_with_its_provider_and_its_database(var, published):
    port = published(PAYMENT_PROVIDER="stripe", DATABASE_URL="postgres://demo-db/onceshop")

    done = run_beside(var, port, sys.executable, "-c", SHOW)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["stripe", "postgres://demo-db/onceshop"]


def test_the_published_file_is_its_owners_alone_and_goes_when_the_demo_stops(var, published):
    port = published(PAYMENT_PROVIDER="sandbox", STRIPE_API_KEY="sk_test_x")
    path = beside.demo_file(port)

    assert path.stat().st_mode & 0o077 == 0
    assert json.loads(path.read_text())["env"]["PAYMENT_PROVIDER"] == "sandbox"
    beside.withdraw(port=port)
    assert not path.exists()


def test_a_provider_the_running_demo_does_not_have_is_refused_in_one_line(var, published):
    port = published(PAYMENT_PROVIDER="sandbox", DATABASE_URL="postgres://demo-db/onceshop")

    done = run_beside(var, port, sys.executable, "-c", SHOW, PAYMENT_PROVIDER="stripe")

    assert done.returncode == beside.NO_DEMO
    assert said(done) == [beside.wrong_provider_line(port, "sandbox", "stripe")]
    assert done.stdout == ""


def test_a_demo_killed_before_it_withdrew_is_not_running(var):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    port = str(free_port())
    path = beside.demo_file(port)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pid": int(gone.stdout), "started": "1", "env": {}}))

    done = run_beside(var, port, sys.executable, "-c", SHOW)

    assert done.returncode == beside.NO_DEMO
    assert said(done) == [beside.no_demo_line(port)]


def test_each_providers_demo_keeps_its_own_database_redis_and_provider_state(var):
    show = "from config import embedded as e; print(e.PG_DIR, e.REDIS_DIR)"

    def dirs(provider: str) -> list[str]:
        env = environment(var, PAYMENT_PROVIDER=provider)
        done = subprocess.run([sys.executable, "-c", show], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=True)  # fmt: skip
        return done.stdout.split()

    sandbox, stripe = dirs("sandbox"), dirs("stripe")

    assert set(sandbox).isdisjoint(stripe)
    assert all(Path(path).is_relative_to(var) for path in sandbox + stripe)


@pytest.mark.django_db
def test_a_database_given_by_url_holds_one_providers_demo():
    settings = connection.settings_dict
    url = f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    try:
        assert runner.database_claim(url, "sandbox") is None
        assert runner.database_claim(url, "sandbox") is None  # its own again: fine

        assert runner.database_claim(url, "stripe") == "sandbox"
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'COMMENT ON DATABASE "{settings["NAME"]}" IS NULL')


def idle(var: Path) -> subprocess.CompletedProcess[str]:
    """What `make clean` runs before it removes the state directory."""
    return subprocess.run(
        [sys.executable, "-m", "demo.clean"],
        cwd=ROOT,
        env=environment(var),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_make_clean_refuses_while_a_demo_runs(var, published):
    port = published(PAYMENT_PROVIDER="sandbox")

    done = idle(var)

    assert done.returncode == 1
    assert f"a demo on PORT {port}" in done.stdout
    assert beside.demo_file(port).exists()


def test_make_clean_first_stops_the_servers_a_killed_demo_left_running(var):
    # A demo killed outright: the embedded Redis it started (a daemon) outlives it.
    start = "from config.embedded import start_redis; start_redis()"
    subprocess.run([sys.executable, "-c", start], cwd=ROOT, env=environment(var), check=True)
    pid = int((var / "redis" / "redis.pid").read_text())
    assert beside.start_time(pid)

    try:
        done = idle(var)
    finally:
        left = beside.start_time(pid)
        if left:  # only if the check below fails: leave nothing running
            os.kill(pid, signal.SIGKILL)

    assert done.returncode == 0, done.stdout + done.stderr
    assert left is None
