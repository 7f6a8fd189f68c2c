"""Template filters of the pages: amounts for people, names that break at their
separators, long keys shortened."""

import re

from django import template
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.utils.html import escape, json_script
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import get_language, gettext

from demo.shop import access
from edge.money import money as format_money
from edge.problems import code_spans

register = template.Library()


@register.filter
def money(amount: int | None, currency: str) -> str:
    """1999, "CNY" -> "19.99 CNY" (English), "¥19.99" (Chinese): edge.money, in the
    page's language."""
    return format_money(amount, currency, language=get_language() or "en")


register.filter("code_spans", code_spans)  # the problem pages' rendering (edge/problems.py)

# After a path's "/", a dotted name's "." (not the one before a file's extension) and
# an identifier's "_": where a name may break in a narrow column, and nowhere else.
_NAME_BREAK = re.compile(r"(?<=[/_])|(?<=\.)(?![A-Za-z0-9]+$)")


@register.filter
def breakable(name: str) -> SafeString:
    """A path or identifier that wraps only at its separators: <wbr> after each one.

    A copy of the text is the name as it is (``<wbr>`` adds no character).
    """
    parts = _NAME_BREAK.split(str(name))
    return mark_safe("<wbr>".join(escape(part) for part in parts))  # noqa: S308 - escaped


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


@register.simple_tag
def script_messages() -> SafeString:
    """The scripts' sentences in the page's language, as a JSON island they read.

    One catalogue for the pages and their scripts: the texts are marked here with
    gettext, and pay.js / live.js fill in their ``%(name)s`` placeholders.
    """
    messages = {
        "live_updated": gettext("Live: updated %(time)s."),
        "live_paused": gettext("Live updates paused (%(error)s); retrying."),
        "click": gettext("Click %(click)s"),
        "click_retry": gettext("%(label)s (retry %(retry)s, same key)"),
        "sent": gettext("%(title)s: sent…"),
        "waiting": gettext(
            "%(title)s: sent; waiting for the provider (up to %(timeout)s s; the shop holds "
            "the key meanwhile)… %(seconds)s s"
        ),
        "label": gettext("%(label)s: "),
        "answered": gettext("%(title)s (answered %(ordinal)s)"),
        # The order answers came back in: "1st", "2nd", "3rd", then "%(n)sth".
        "ordinals": [gettext("1st"), gettext("2nd"), gettext("3rd")],
        "nth": gettext("%(n)sth"),
        "replayed": gettext("replayed"),
        "fresh": gettext("fresh"),
        "not_stored": gettext("not stored · nothing was kept for this key"),
        "not_json_retry": gettext("An unexpected answer (not JSON). Retrying with the same key."),
        "not_json_final": gettext(
            "An unexpected answer (not JSON). Reload the page; nothing is charged twice."
        ),
        "retry_in": gettext("Retrying with the same key in %(seconds)s s."),
        "stopped": gettext("Stopped retrying. The reconciler settles it; reload to see."),
        "no_answer": gettext(
            "%(title)s: no answer (network). Retrying with the same key in %(seconds)s s."
        ),
        "story_running": gettext(
            "The story is running: %(seconds)s s of about %(about)s s. Its steps show here "
            "when it ends."
        ),
        "story_button": gettext("Running…"),
    }
    return json_script(messages, "script-messages")
