"""The chaos tool sits outside the app: the app never imports it."""

import pytest

from tests.test_layers import APPS
from tests.tools.lab.test_boundaries import imported_roots
from tools.chaos.__main__ import parse


@pytest.mark.parametrize("app", sorted(APPS))
def test_the_app_never_imports_the_chaos_tool(app):
    assert "chaos" not in imported_roots(app)


@pytest.mark.parametrize(
    "argv", [["--orders", "0"], ["--clients", "0"], ["--pace", "0"], ["--orders", "many"]]
)
def test_bad_arguments_are_refused_before_anything_starts(argv, capsys):
    with pytest.raises(SystemExit) as refused:
        parse(argv)

    assert refused.value.code == 2
    assert "usage" in capsys.readouterr().err
