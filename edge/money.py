"""Amounts for people: the shop's minor units as major units, with the currency.

The shop stores and sends every amount as an integer of its currency's minor unit
(ISO 4217): 1999 CNY is 19.99 yuan, 500 JPY is 500 yen (the yen has no minor
unit), 1500 KWD is 1.500 dinars (the dinar has three). The API's JSON stays in
minor units (docs/design.md); whatever a person reads — the pages, the admin,
the audit's findings, the story — is written by ``money``, here.
"""

from __future__ import annotations

# ISO 4217's minor-unit exponents that are not 2; every other currency has cents.
_NO_MINOR_UNIT = "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF"
EXPONENTS = {
    **dict.fromkeys(_NO_MINOR_UNIT.split(), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
    **dict.fromkeys(("CLF", "UYW"), 4),
}
# How a Chinese reader expects an amount: the symbol first (as CLDR writes them; ¥
# alone is the yuan), thousands grouped. English writes the amount, then its ISO
# code ("19.99 CNY"), which no reader misreads; so does Chinese for a currency
# without a symbol here.
CHINESE_SYMBOLS = {"CNY": "¥", "USD": "US$", "EUR": "€", "GBP": "£", "JPY": "JP¥", "HKD": "HK$"}


def minor_unit_exponent(currency: str) -> int:
    """How many digits the currency's minor unit has: 2 for CNY, 0 for JPY, 3 for KWD."""
    return EXPONENTS.get(currency.upper(), 2)


def major_units(amount: int, currency: str) -> str:
    """The number alone, for a table whose currency has a column of its own: 1999,
    "CNY" -> "19.99"; 500, "JPY" -> "500"; -7, "KWD" -> "-0.007"."""
    exponent = minor_unit_exponent(currency)
    major, minor = divmod(abs(amount), 10**exponent)
    sign = "-" if amount < 0 else ""
    return f"{sign}{major}" if exponent == 0 else f"{sign}{major}.{minor:0{exponent}d}"


def money(amount: int | None, currency: str | None, *, language: str = "en") -> str:
    """1999, "CNY" -> "19.99 CNY" ("¥19.99" in Chinese, ``language="zh-hans"``).

    Integer arithmetic only, never a float. No amount is "—"; an amount without a
    currency cannot be read in major units, and is written as the number it is.
    """
    if amount is None:
        return "—"
    if not currency:
        return str(amount)
    symbol = CHINESE_SYMBOLS.get(currency) if language == "zh-hans" else None
    if symbol is None:
        return f"{major_units(amount, currency)} {currency}"
    exponent = minor_unit_exponent(currency)
    major, minor = divmod(abs(amount), 10**exponent)
    sign = "-" if amount < 0 else ""
    grouped = f"{major:,}" if exponent == 0 else f"{major:,}.{minor:0{exponent}d}"
    return f"{sign}{symbol}{grouped}"
