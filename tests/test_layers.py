"""Layers point down (docs/architecture.md): an app imports its own layer or lower ones.

The imports are read with ``ast`` from every module of every app (migrations
included, function-level and TYPE_CHECKING imports included: an arrow is an
arrow), never grepped as strings.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.processes import ROOT

# Lowest first. An app may import its own layer and the layers below it.
LAYERS = ["config", "idempotency", "orders", "payments", "callbacks", "reconcile", "storefront"]
# Beside config at the bottom: health, metrics and logs. Every app (the sandbox too:
# its log lines carry the request id) may import it; it imports config alone, and the
# apps hand it their gauges at start-up instead of being imported.
OBSERVABILITY = "observability"
# The sandbox is another company: it builds on config (and the shared log context)
# alone, and of the shop's apps only the demo's pages (the chaos panel) reach into it.
SANDBOX = "sandbox"
SANDBOX_MAY_IMPORT = {"config", OBSERVABILITY}
MAY_IMPORT_SANDBOX = {"storefront"}
APPS = {*LAYERS, SANDBOX, OBSERVABILITY}


def imported_apps(source: str) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in ``source`` naming an app."""
    return [(line, top) for line, top in imported_packages(source) if top in APPS]


def imported_packages(source: str) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in ``source``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue  # relative imports stay inside their own app
        found += [(node.lineno, name.split(".")[0]) for name in names]
    return sorted(found)


def allowed(importer: str, imported: str) -> bool:
    if importer == imported:
        return True
    if importer == OBSERVABILITY:
        return imported == "config"
    if imported == OBSERVABILITY:
        return True
    if importer == SANDBOX:
        return imported in SANDBOX_MAY_IMPORT
    if imported == SANDBOX:
        return importer in MAY_IMPORT_SANDBOX
    return LAYERS.index(imported) <= LAYERS.index(importer)


def violations(app: str) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line} imports {imported}"
        for path in sorted((ROOT / app).rglob("*.py"))
        for line, imported in imported_apps(path.read_text())
        if not allowed(app, imported)
    ]


@pytest.mark.parametrize("app", sorted(APPS))
def test_imports_point_down_the_layers(app):
    assert violations(app) == []


def test_every_app_has_a_place_in_the_layers():
    apps = {path.parent.name for path in Path(ROOT).glob("*/apps.py")}
    assert apps - {"config"} <= APPS  # config is the foundation, not an app


def test_the_reader_sees_every_kind_of_import():
    source = (
        "import payments.models\n"
        "from callbacks import models\n"
        "from . import local\n"
        "def later():\n"
        "    from reconcile.audit.run import audit_run\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from demo.shop.books import x\n"
    )

    assert imported_apps(source) == [
        (1, "payments"),
        (2, "callbacks"),
        (5, "reconcile"),
        (8, "storefront"),
    ]
    assert not allowed("orders", "payments")
    assert not allowed("payments", "callbacks")
    assert not allowed("callbacks", "reconcile")
    assert not allowed("reconcile", "storefront")
    assert not allowed("sandbox", "payments")
    assert not allowed("payments", "sandbox")
    assert allowed("storefront", "sandbox")
    assert allowed("reconcile", "orders")
    assert allowed("sandbox", "observability")
    assert allowed("payments", "observability")
    assert not allowed("observability", "payments")
