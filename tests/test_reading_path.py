"""How many of the product's files one pay request runs code in: what a learner
following a pay through the code has to open.

Measured by profiling one fresh pay (a new key, after one warm-up pay of
another order) through the test client with ``sys.setprofile``: every file of
the product's packages in which a function (not module-level code) ran, less
``config/``, migrations and ``__init__`` files. The figures are printed, all
the product's files and the core's among them; each ceiling is the figure
measured, so the path never grows unnoticed (the reading-path target,
docs/design.md, is 20).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tests.conftest import new_key
from tests.processes import ROOT
from tests.test_layers import PRODUCT

pytestmark = pytest.mark.django_db(transaction=True)

FILES_PER_PAY = 30
CORE_FILES_PER_PAY = 15
COUNTED = {package for package in PRODUCT if package != "config"}
CORE = ("idempotency", "orders", "payments", "callbacks", "reconcile")


def _product_file(filename: str) -> str | None:
    path = Path(filename)
    if not path.is_relative_to(ROOT):
        return None
    relative = path.relative_to(ROOT)
    if (
        relative.parts[0] not in COUNTED
        or "migrations" in relative.parts
        or relative.name == "__init__.py"
    ):
        return None
    return relative.as_posix()


def files_run_by(call: Any) -> set[str]:
    """The product files in which a function ran during ``call()``."""
    seen: set[str] = set()

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        code = frame.f_code
        if (
            event == "call"
            and code.co_name != "<module>"
            and (name := _product_file(code.co_filename))
        ):
            seen.add(name)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


def test_one_fresh_pay_runs_code_in_few_product_files(pay, create_order, capsys):
    assert pay(new_key()).status_code == 200  # warm-up: imports, caches, connections
    number = create_order(key=new_key()).json()["number"]

    files = files_run_by(lambda: pay(new_key(), number=number))

    core = {name for name in files if name.split("/")[0] in CORE}
    with capsys.disabled():
        print(f"\none fresh pay runs code in {len(files)} product files, {len(core)} of the core:")
        for name in sorted(files):
            print(f"  {name}")
    assert len(files) <= FILES_PER_PAY, sorted(files)
    assert len(core) <= CORE_FILES_PER_PAY, sorted(core)


# The four layers' files: the reading path must cover each.
LAYERS_READ = {
    "idempotency/phases.py",  # the record and the business rows in one transaction
    "payments/services.py",  # the conditional UPDATE
    "callbacks/services.py",  # the unique constraint's IntegrityError
    "reconcile/recovery/unsettled_payments.py",  # ask, then roll forward or back
}
MAX_FILES, MAX_LINES = 10, 2000


@pytest.mark.parametrize("page", ["docs/design.md", "docs/zh-CN/design.md"])
def test_the_reading_path_covers_the_four_layers_in_few_files_and_lines(page):
    text = (ROOT / page).read_text()
    section = re.split(r"^## ", text, flags=re.MULTILINE)
    [reading] = [part for part in section if part.startswith(("Read in this order", "阅读顺序"))]
    rows = re.findall(r"^\| \d+ \| `([^`]+)` \| (\d+) \|", reading, flags=re.MULTILINE)

    lines = {path: len((ROOT / path).read_text().splitlines()) for path, _ in rows}
    assert {path: int(count) for path, count in rows} == lines, "the table's counts are wc -l's"
    assert len(rows) <= MAX_FILES
    assert sum(lines.values()) <= MAX_LINES
    assert set(lines) >= LAYERS_READ
    assert f"{sum(lines.values()):,}" in reading  # the total the page states
