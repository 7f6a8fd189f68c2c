"""edge/money.py: the one place that writes the shop's minor units for people."""

import pytest

from edge.money import major_units, minor_unit_exponent, money


@pytest.mark.parametrize(
    ("currency", "exponent"),
    [
        ("CNY", 2),
        ("USD", 2),
        ("JPY", 0),
        ("KRW", 0),
        ("ISK", 0),
        ("KWD", 3),
        ("BHD", 3),
        ("TND", 3),
        ("CLF", 4),
        ("jpy", 0),
        ("XYZ", 2),
    ],
)
def test_the_exponent_is_iso_4217s_minor_unit(currency, exponent):
    assert minor_unit_exponent(currency) == exponent


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        (2500, "CNY", "25.00 CNY"),
        (12800, "CNY", "128.00 CNY"),
        (11400, "CNY", "114.00 CNY"),
        (0, "CNY", "0.00 CNY"),
        (5, "CNY", "0.05 CNY"),
        (-250, "CNY", "-2.50 CNY"),
        (500, "JPY", "500 JPY"),
        (1500, "KWD", "1.500 KWD"),
        (7, "KWD", "0.007 KWD"),
        (123456789, "USD", "1234567.89 USD"),
        (None, "CNY", "—"),
        (2500, None, "2500"),  # no currency named: no unit to read it in
    ],
)
def test_minor_units_are_written_in_major_units_with_the_currency(amount, currency, shown):
    assert money(amount, currency) == shown


def test_a_chinese_reader_gets_the_symbol_first_and_thousands_grouped():
    assert money(123456789, "CNY", language="zh-hans") == "¥1,234,567.89"
    assert money(1500, "JPY", language="zh-hans") == "JP¥1,500"
    assert money(1500, "KWD", language="zh-hans") == "1.500 KWD"


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [(1999, "CNY", "19.99"), (500, "JPY", "500"), (-7, "KWD", "-0.007"), (0, "USD", "0.00")],
)
def test_major_units_alone_for_a_table_that_names_the_currency_apart(amount, currency, shown):
    assert major_units(amount, currency) == shown
