"""The core is plain Django: what a learner reads is the pattern, not what speeds it up.

The five apps hold the four layers and the flows (docs/design.md, "Layout"). No
private Django API (``_state``), no SQL assembled from a model's ``_meta``, and no
word of the fast paths or of the switch that turns the key layer off: those plug
in from outside the core, each at one setting (``fastpaths/``, docs/configuration.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.processes import ROOT

CORE = ["idempotency", "orders", "payments", "callbacks", "reconcile"]

# What the core never says, each with why.
FORBIDDEN = {
    r"\b_state\b": "a private Django API",
    r"_meta\.db_table|quote_name\(": "SQL assembled from a model's _meta",
    r"\bfastpaths\b": "the fast-path package",
    r"\bIDEMPOTENCY_ENABLED\b|\bunkeyed\b": "the key layer's off switch",
}


def core_files() -> list[Path]:
    return [
        path
        for package in CORE
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def findings(path: Path) -> list[str]:
    """``line: why`` for every forbidden thing in ``path``."""
    return [
        f"{number}: {why}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        for pattern, why in FORBIDDEN.items()
        if re.search(pattern, line)
    ]


def test_the_core_is_plain_django():
    found = {str(path.relative_to(ROOT)): findings(path) for path in core_files()}

    assert {path: lines for path, lines in found.items() if lines} == {}


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("record._state.adding = False", "a private Django API"),
        ("table = Order._meta.db_table", "SQL assembled from a model's _meta"),
        ("column = connection.ops.quote_name(field.column)", "SQL assembled"),
        ("from fastpaths.replay import ReplayMiddleware", "the fast-path package"),
        ("if settings.IDEMPOTENCY_ENABLED:", "the key layer's off switch"),
        ("from idempotency.unkeyed import run_unkeyed", "the key layer's off switch"),
    ],
)
def test_each_forbidden_thing_is_found(tmp_path, line, why):
    probe = tmp_path / "probe.py"
    probe.write_text(f"x = 1\n{line}\n")

    [found] = findings(probe)
    assert found.startswith(f"2: {why}")


def test_plain_django_is_not_forbidden(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "Order.objects.filter(pk=order.pk, status=OrderStatus.UNPAID).update(status=PAID)\n"
        "max_length = Payment._meta.get_field('failure_code').max_length\n"
        "record.save(force_insert=True)\n"
    )

    assert findings(probe) == []
