"""Template filters of the pages: money in minor units, long keys shortened."""

from django import template
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from storefront import access

register = template.Library()

# ISO 4217 minor-unit exponents that are not 2; every other currency has cents.
_EXPONENTS = {"JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0, "BHD": 3, "KWD": 3, "JOD": 3}


@register.filter
def money(amount: int | None, currency: str) -> str:
    """1999, "CNY" -> "19.99 CNY". Integer arithmetic only: money is never a float."""
    if amount is None:
        return "—"
    exponent = _EXPONENTS.get(currency, 2)
    if exponent == 0:
        return f"{amount} {currency}"
    major, minor = divmod(abs(amount), 10**exponent)
    sign = "-" if amount < 0 else ""
    return f"{sign}{major}.{minor:0{exponent}d} {currency}"


@register.filter
def short(key: str | None, length: int = 10) -> str:
    """A long key's first characters, enough to tell two apart on a screen."""
    if not key:
        return ""
    return key if len(key) <= length + 2 else f"{key[:length]}…"


@register.filter
def may_see_books(user: AbstractBaseUser | AnonymousUser) -> bool:
    return access.may_see_books(user)


@register.filter
def may_use_chaos(user: AbstractBaseUser | AnonymousUser) -> bool:
    """For the navigation: the chaos link shows only to those the panel lets in."""
    return access.may_use_chaos(user)
