"""Layers point down (docs/architecture.md), and arrows only from demo/ and tools/ to the product.

The product is ``config``, ``edge``, the apps, ``observability``, the operations,
the fast paths and the published client: it never imports ``demo/`` or ``tools/``, so a fork deletes
both and keeps a working shop (tests/test_product_alone.py proves it). Inside
the product an app imports its own layer or lower ones; the operations sit beside
the core and the fast paths on top: both import the core, which never imports
them. ``demo/`` never imports ``tools/``; the stand-in provider (``demo.sandbox``)
is another company and builds on the edge alone.

The imports are read with ``ast`` from every module of every package (migrations
included, function-level and TYPE_CHECKING imports included: an arrow is an
arrow), never grepped as strings.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.processes import ROOT

# The product's layers, lowest first. A package may import its own layer and the
# layers below it. The edge (errors, parsers, throttles, auth) is what every app
# answers through; config wires the apps together (settings, URLs, Celery).
LAYERS = ["edge", "config", "idempotency", "orders", "payments", "callbacks", "reconcile"]
# Beside the layers: health, metrics and logs. Every package may import it; it
# imports the edge and config alone, and the apps hand it their gauges at start-up
# instead of being imported.
OBSERVABILITY = "observability"
# On top of the core: the fast paths (the one-SELECT replay, hand-written SQL, batched
# settlement). They import the core and the layers below it; no layer imports them,
# each is plugged in by a setting.
FASTPATHS = "fastpaths"
# Beside the core: the operations (the audit, the statement), each an app of its own.
# They import the core, the edge, config and observability; no layer imports them,
# but for the one hand-off named below.
OPERATIONS = "operations"
# The one arrow from the core into the operations, named so a reader sees it: the
# operator's desk (reconcile/desk/) opens, works and closes cases on the statement's
# discrepancies, so it reads the statement's models. Nothing else of the core may.
DESK_READS_THE_STATEMENT = ("reconcile/desk/", "operations.statements.models")
# The published Python client talks to the API over HTTP: it imports nothing of the app.
CLIENT = "onceshop_client"
PRODUCT = {*LAYERS, OBSERVABILITY, OPERATIONS, FASTPATHS, CLIENT}
# What only the demo runs (its pages, the stand-in provider, the runner, the embedded
# services), and what measures and teaches (bench, chaos, lab).
DEMO, SHOP, SANDBOX, TOOLS = "demo", "demo.shop", "demo.sandbox", "tools"
# The sandbox is another company: it builds on the edge and config (and the shared log
# context) alone; of the product's apps none reaches into it.
SANDBOX_MAY_IMPORT = {"edge", "config", OBSERVABILITY}
UNITS = {*PRODUCT, DEMO, SHOP, SANDBOX, TOOLS}


def unit(module: str) -> str:
    """The package a module belongs to here: a top-level one (``operations`` with all
    its rooms), or one of the demo's apps."""
    parts = module.split(".")
    if parts[0] == DEMO and len(parts) > 1 and f"{DEMO}.{parts[1]}" in (SHOP, SANDBOX):
        return f"{DEMO}.{parts[1]}"
    return parts[0]


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in ``source``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from demo import shop`` names the demo's app, not the demo package.
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue  # relative imports stay inside their own package
        found += [(node.lineno, name) for name in names]
    return sorted(found)


def imported_units(source: str) -> list[tuple[int, str]]:
    """(line, package) of every absolute import in ``source`` naming one of ours."""
    return [(line, unit(name)) for line, name in imported_modules(source) if unit(name) in UNITS]


def allowed(importer: str, imported: str) -> bool:
    if importer == imported:
        return True
    if importer == TOOLS:
        return True  # the tools measure and teach the product and the demo alike
    if importer in (DEMO, SHOP):
        return imported != TOOLS
    if importer == SANDBOX:
        return imported in SANDBOX_MAY_IMPORT
    # From here on the importer is the product's.
    if imported in (DEMO, SHOP, SANDBOX, TOOLS):
        return False
    if importer == CLIENT or imported == CLIENT:
        return False
    if importer == FASTPATHS:
        return True  # the fast paths sit on top of the whole product
    if imported == FASTPATHS:
        return False  # the core and the edge never know them
    if importer == OPERATIONS:
        return True  # beside the core: the layers, observability (not the fast paths)
    if imported == OPERATIONS:
        return False  # the core, the edge and config never know them
    if importer == OBSERVABILITY:
        return imported in ("edge", "config")
    if imported == OBSERVABILITY:
        return True
    return LAYERS.index(imported) <= LAYERS.index(importer)


def modules_of(package: str) -> list[Path]:
    folder = ROOT / package.replace(".", "/")
    files = sorted(folder.rglob("*.py"))
    if package == DEMO:  # the demo's own modules, not its apps (each checked on its own)
        files = [path for path in files if unit(_module(path)) == DEMO]
    return files


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def handed_off(path: Path, module: str) -> bool:
    """The import is the named hand-off (``DESK_READS_THE_STATEMENT``)."""
    folder, models = DESK_READS_THE_STATEMENT
    inside = path.relative_to(ROOT).as_posix().startswith(folder)
    return inside and (module == models or module.startswith(f"{models}."))


def violations(package: str) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in modules_of(package)
        for line, name in imported_modules(path.read_text())
        if unit(name) in UNITS and not allowed(package, unit(name)) and not handed_off(path, name)
    ]


@pytest.mark.parametrize("package", sorted(UNITS))
def test_imports_point_down_the_layers(package):
    assert violations(package) == []


@pytest.mark.parametrize("package", sorted(PRODUCT))
def test_the_product_never_imports_the_demo_or_the_tools(package):
    arrows = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in modules_of(package)
        for line, name in imported_modules(path.read_text())
        if name.split(".")[0] in (DEMO, TOOLS)
    ]

    assert arrows == []


def test_the_demo_never_imports_the_tools():
    arrows = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sorted((ROOT / DEMO).rglob("*.py"))
        for line, name in imported_modules(path.read_text())
        if name.split(".")[0] == TOOLS
    ]

    assert arrows == []


def test_every_package_has_a_place_in_the_layers():
    tops = {
        path.parent.name
        for path in Path(ROOT).glob("*/__init__.py")
        if path.parent.name not in ("tests",)
    }
    demo_apps = {f"{DEMO}.{path.parent.name}" for path in (ROOT / DEMO).glob("*/apps.py")}

    assert tops <= UNITS
    assert demo_apps == {SHOP, SANDBOX}


def test_the_reader_sees_every_kind_of_import():
    source = (
        "import payments.models\n"
        "from callbacks import models\n"
        "from . import local\n"
        "def later():\n"
        "    from reconcile.passes import pass_run_once\n"
        "from operations.audit.run import audit_run\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from demo.shop.books import x\n"
        "from demo import sandbox\n"
        "import tools.bench\n"
    )

    assert imported_units(source) == [
        (1, "payments"),
        (2, "callbacks"),
        (5, "reconcile"),
        (6, OPERATIONS),
        (9, SHOP),
        (10, SANDBOX),
        (11, TOOLS),
    ]
    assert not allowed("orders", "payments")
    assert not allowed("payments", "callbacks")
    assert not allowed("callbacks", "reconcile")
    assert not allowed("edge", "config")
    assert not allowed("reconcile", SHOP)
    assert not allowed("config", DEMO)
    assert not allowed("orders", TOOLS)
    assert not allowed(OBSERVABILITY, "payments")
    assert not allowed(CLIENT, "orders")
    assert not allowed(SANDBOX, "payments")
    assert not allowed("payments", SANDBOX)
    assert not allowed(DEMO, TOOLS)
    assert not allowed(SHOP, TOOLS)
    assert allowed(SHOP, SANDBOX)
    assert allowed(SHOP, "reconcile")
    assert allowed(TOOLS, SHOP)
    assert allowed("reconcile", "orders")
    assert allowed("config", "edge")
    assert allowed(SANDBOX, OBSERVABILITY)
    assert allowed("payments", OBSERVABILITY)
    assert allowed(OBSERVABILITY, "edge")
    assert allowed(FASTPATHS, "reconcile")
    assert not allowed("idempotency", FASTPATHS)
    assert not allowed("reconcile", FASTPATHS)
    assert not allowed("config", FASTPATHS)
    assert unit("operations.statements.models") == unit("operations.audit.run") == OPERATIONS
    assert allowed(OPERATIONS, "reconcile")
    assert allowed(OPERATIONS, "payments")
    assert allowed(OPERATIONS, "edge")
    assert allowed(OPERATIONS, "config")
    assert allowed(OPERATIONS, OBSERVABILITY)
    assert not allowed(OPERATIONS, FASTPATHS)
    assert not allowed(OPERATIONS, DEMO)
    assert not allowed(OPERATIONS, TOOLS)
    assert not allowed("reconcile", OPERATIONS)
    assert not allowed("payments", OPERATIONS)
    assert not allowed("idempotency", OPERATIONS)
    assert not allowed("config", OPERATIONS)
    assert not allowed(OBSERVABILITY, OPERATIONS)
    desk, statement = ROOT / "reconcile/desk/services.py", "operations.statements.models"
    assert handed_off(desk, f"{statement}.StatementDiscrepancy")
    assert not handed_off(desk, "operations.statements.jobs.leftovers_run_once")
    assert not handed_off(ROOT / "reconcile/passes.py", f"{statement}.StatementDiscrepancy")
