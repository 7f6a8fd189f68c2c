"""Commands a person runs print for a person: no JSON log lines between their sentences.

Servers log one JSON line per event (the settings' default, for a log pipeline);
``make story``, ``make audit``, ``make reconcile`` and ``make lab`` set the plain
format and warnings only (the Makefile's ``FOR_A_PERSON``). Here the exact
command ``make -n`` prints for ``make audit`` runs against the test database.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from django.conf import settings

from demo import beside
from tests.cluster.conftest import free_port
from tests.factories import UserFactory

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.django_db(transaction=True)


def _recipe(target: str) -> str:
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(ROOT), target],  # noqa: S607
        capture_output=True,
        text=True,
        check=True,
    )
    return dry.stdout.strip().splitlines()[-1]


def _database_url() -> str:
    database = settings.DATABASES["default"]
    return f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"


def _run(command: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],  # noqa: S607
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "DATABASE_URL": _database_url(), **env},
    )


@pytest.fixture
def beside_a_demo(tmp_path, monkeypatch, sandbox):
    """The environment of a command run beside a demo on the test database.

    The demo is this process, published the way `make demo` publishes itself
    (demo/beside.py), with the test database and the live sandbox as its services.
    """
    var = tmp_path / "var"
    monkeypatch.setattr(beside, "DEMOS_DIR", var / "demos")
    port = str(free_port())
    demo = {"PORT": port, "DATABASE_URL": _database_url(), "PROVIDER_BASE_URL": sandbox}
    beside.publish(port=port, env={**demo, "PAYMENT_PROVIDER": "sandbox"})
    yield {"ONCESHOP_VAR_DIR": str(var), "PORT": port}
    beside.withdraw(port=port)


def _json_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith('{"ts": ')]


@pytest.mark.parametrize("target", ["story", "audit", "reconcile", "lab"])
def test_the_commands_a_person_runs_log_plain_warnings(target):
    recipe = _recipe(target)

    assert "LOG_FORMAT=${LOG_FORMAT:-plain}" in recipe
    assert "LOG_LEVEL=${LOG_LEVEL:-WARNING}" in recipe


def test_make_audit_prints_no_json_log_line(paid_order, beside_a_demo):
    recipe = _recipe("audit")

    audit = _run(recipe, **beside_a_demo)
    logged = _run(recipe, **beside_a_demo, LOG_FORMAT="json", LOG_LEVEL="INFO")

    assert audit.returncode == 0, audit.stderr
    assert "clean" in audit.stdout.lower()
    assert _json_lines(audit.stdout + audit.stderr) == []
    # The same command with the servers' format does log JSON: the check can fail.
    assert _json_lines(logged.stdout + logged.stderr)


@pytest.fixture
def paid_order(order, pay):
    assert pay().status_code == 200
    UserFactory.create(username="staff", is_staff=True)
    return order
