"""What the lab and the client may depend on, and what may depend on them."""

import pytest

from tests.processes import ROOT
from tests.test_layers import PRODUCT, imported_modules
from tools.lab.__main__ import main
from tools.lab.report import Finding, markdown_table


def imported_names(package: str) -> set[str]:
    """The modules that any module of ``package`` imports."""
    return {
        name
        for path in (ROOT / package).rglob("*.py")
        for _line, name in imported_modules(path.read_text())
    }


def imported_roots(package: str) -> set[str]:
    """The top-level packages that any module of ``package`` imports."""
    return {name.split(".")[0] for name in imported_names(package)}


def imports_tool(package: str, tool: str) -> bool:
    return any(
        name == f"tools.{tool}" or name.startswith(f"tools.{tool}.")
        for name in imported_names(package)
    )


@pytest.mark.parametrize("package", [*sorted(PRODUCT), "demo"])
def test_neither_the_product_nor_the_demo_imports_the_lab(package):
    assert not imports_tool(package, "lab")


def test_the_client_needs_only_the_standard_library_and_requests():
    # So it can be copied out of the repository as it is.
    project = {*PRODUCT - {"onceshop_client"}, "demo", "tools", "tests", "django", "rest_framework"}
    assert imported_roots("onceshop_client") & project == set()
    assert "requests" in imported_roots("onceshop_client")


@pytest.mark.parametrize("argv", [["11"], ["0"], ["five"]])
def test_unknown_experiments_are_refused_before_anything_starts(argv, capsys):
    assert main(argv) == 2
    assert "1" in capsys.readouterr().err


def test_the_table_escapes_pipes_in_cells():
    table = markdown_table([Finding(number=1, mistake="a|b", naive="n", onceshop="o")])

    assert "| 1 | a\\|b | n | o |" in table
