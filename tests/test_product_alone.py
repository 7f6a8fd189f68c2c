"""The product stands alone: a fork deletes demo/ and tools/ and keeps a working shop.

In a copy of the repository (its tracked files) without ``demo/``, ``tools/``
and their tests, ``manage.py check`` passes, ``migrate`` builds a fresh
database of the copy's own, and the product's tests pass there. The tests run
are a subset, to keep this one test short: the idempotency layer (its core and
its behaviour matrix), orders, callbacks, the problems and the schema: the API
the product serves and the layer itself, none of which needs the stand-in
provider. Tests that
need the demo are marked ``demo`` by tests/conftest.py and left out.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.conf import settings

from tests.processes import ROOT

pytestmark = pytest.mark.slow

# What a fork deletes: the demo, the tools, and their tests.
DEMO_AND_TOOLS = ("demo/", "tools/", "tests/demo/", "tests/tools/")
# The product's own tests run in the copy (see the module docstring).
PRODUCT_TESTS = [
    "tests/idempotency",
    "tests/orders",
    "tests/callbacks/test_api.py",
    "tests/test_errors.py",
    "tests/test_problems.py",
    "tests/test_schema.py",
]
# Fewer passed than this and the run proves nothing (today: about 140 of them).
MIN_PASSED = 120


def product_copy(target: Path) -> Path:
    """The repository's tracked files, without the demo and the tools, under ``target``."""
    git = shutil.which("git")
    assert git is not None, "git lists the repository's files"
    tracked = subprocess.run(
        [git, "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True
    ).stdout.split("\0")
    for name in tracked:
        if not name or name.startswith(DEMO_AND_TOOLS) or not (ROOT / name).is_file():
            continue
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target / name)
    return target


def _server_url(database: str) -> str:
    db = settings.DATABASES["default"]
    host = quote(db["HOST"] or "", safe="")
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgresql://{db['USER']}@{host}{port}/{database}"


@pytest.fixture
def fresh_database() -> Iterator[str]:
    """A database of the copy's own, empty, dropped afterwards (with the copy's test one)."""
    name = f"{settings.DATABASES['default']['NAME']}_alone"[:60]
    names = [name, f"test_{name}"]
    with psycopg.connect(_server_url("postgres"), autocommit=True) as admin:
        for each in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{each}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _server_url(name)
    finally:
        with psycopg.connect(_server_url("postgres"), autocommit=True) as admin:
            for each in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{each}" WITH (FORCE)')


def run(copy: Path, env: dict[str, str], *args: str, timeout: float) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.timeout(600)
def test_the_product_checks_migrates_and_passes_its_tests_without_demo_and_tools(
    tmp_path, fresh_database
):
    copy = product_copy(tmp_path / "shop")
    assert not (copy / "demo").exists()
    assert not (copy / "tools").exists()
    assert (copy / "tests" / "conftest.py").is_file()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DJANGO_SETTINGS_MODULE", "SANDBOX_ENABLED", "SANDBOX_ONLY")
    }
    # The development profile (no secrets to set), on a database of the copy's own.
    env |= {"DEMO_MODE": "true", "DATABASE_URL": fresh_database, "PYTHONDONTWRITEBYTECODE": "1"}

    run(copy, env, "manage.py", "check", timeout=120)
    migrated = run(copy, env, "manage.py", "migrate", "--no-input", timeout=300)
    tests = run(
        copy,
        env,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "not demo",
        *PRODUCT_TESTS,
        timeout=480,
    )

    # The catalogue is build output, not tracked: the copy's test session compiled it
    # with the product's own compiler (config/i18n.py).
    assert (copy / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.mo").is_file()
    assert "Applying reconcile.0001_initial... OK" in migrated
    assert "sandbox" not in migrated
    assert "storefront" not in migrated
    summary = tests.strip().splitlines()[-1]
    assert " failed" not in summary, summary
    assert " error" not in summary, summary
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, summary
    assert int(passed.group(1)) >= MIN_PASSED, summary
