"""What the lab and the client may depend on, and what may depend on them."""

import pytest

from tests.processes import ROOT
from tests.test_layers import APPS, imported_packages
from tools.lab.__main__ import main
from tools.lab.report import Finding, markdown_table


def imported_roots(package: str) -> set[str]:
    """The top-level packages that any module of ``package`` imports."""
    return {
        top
        for path in (ROOT / package).rglob("*.py")
        for _line, top in imported_packages(path.read_text())
    }


@pytest.mark.parametrize("app", sorted(APPS))
def test_the_app_never_imports_the_lab(app):
    assert "lab" not in imported_roots(app)


def test_the_client_needs_only_the_standard_library_and_requests():
    # So it can be copied out of the repository as it is.
    project = {*APPS, "lab", "bench", "tests", "django", "rest_framework"}
    assert imported_roots("onceshop_client") & project == set()
    assert "requests" in imported_roots("onceshop_client")


@pytest.mark.parametrize("argv", [["11"], ["0"], ["five"]])
def test_unknown_experiments_are_refused_before_anything_starts(argv, capsys):
    assert main(argv) == 2
    assert "1" in capsys.readouterr().err


def test_the_table_escapes_pipes_in_cells():
    table = markdown_table([Finding(number=1, mistake="a|b", naive="n", onceshop="o")])

    assert "| 1 | a\\|b | n | o |" in table
