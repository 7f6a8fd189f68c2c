"""The chaos tool sits outside the app: neither the product nor the demo imports it."""

import pytest

from tests.test_layers import PRODUCT
from tests.tools.lab.test_boundaries import imports_tool
from tools.chaos.__main__ import parse


@pytest.mark.parametrize("package", [*sorted(PRODUCT), "demo"])
def test_neither_the_product_nor_the_demo_imports_the_chaos_tool(package):
    assert not imports_tool(package, "chaos")


@pytest.mark.parametrize(
    "argv",
    [
        ["--orders", "0"],
        ["--clients", "0"],
        ["--pace", "0"],
        ["--orders", "many"],
        ["--topology", "k8s"],
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(argv, capsys):
    with pytest.raises(SystemExit) as refused:
        parse(argv)

    assert refused.value.code == 2
    assert "usage" in capsys.readouterr().err
