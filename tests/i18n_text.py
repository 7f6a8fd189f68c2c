"""What the i18n tests read: the strings marked for translation, and a page's words.

``marked_strings()`` finds every message the storefront asks to translate —
``{% translate %}`` and ``{% blocktranslate %}`` in its templates (through
Django's own template parser, so the message is exactly the one looked up at
render time) and ``gettext`` / ``pgettext`` / ``ngettext`` calls in its Python
code — as catalogue keys (config.i18n.Entry.key).

``visible_text(html)`` is what a reader sees and hears: text nodes and the
attributes that are read out (title, aria-label, placeholder, alt, a button's
value), leaving out scripts, styles, code (identifiers stay as they are), and
anything marked ``translate="no"`` (names, numbers, keys) or written in
another language than the page's (the switcher names each language in its own).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

from django.template import engines
from django.templatetags.i18n import BlockTranslateNode, TranslateNode

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_DIRS = [
    ROOT / "demo" / "shop" / "templates",
    ROOT / "edge" / "templates" / "problems",
]
PYTHON_DIRS = [ROOT / "demo" / "shop", ROOT / "edge", ROOT / "config"]
_GETTEXT = {"_", "gettext", "gettext_lazy", "gettext_noop"}
_PGETTEXT = {"pgettext", "pgettext_lazy"}
_NGETTEXT = {"ngettext", "ngettext_lazy"}
_NPGETTEXT = {"npgettext", "npgettext_lazy"}
_CONTEXT = "\x04"

# Three words or more in a row, each of two letters or more: an English phrase.
# A single identifier (Idempotency-Key, OnceShop, GETDEL) is not a sentence, nor is
# a header as sent ("Idempotent-Replayed: true").
_WORD = r"[A-Za-z][a-z]+(?:-[A-Za-z][a-z]+)*"
ENGLISH_PHRASE = re.compile(rf"\b{_WORD}(?:[ ,;'\u2019]+{_WORD}){{2,}}\b")
CHINESE = re.compile(r"[\u3400-\u9fff]")


def _literal(expression: object) -> str | None:
    var = getattr(expression, "var", None)
    literal = getattr(var, "literal", None)
    return str(literal) if isinstance(literal, str) else None


def _key(message: str, *, context: str | None = None, plural: str | None = None) -> str:
    base = message if plural is None else f"{message}\0{plural}"
    return base if context is None else f"{context}{_CONTEXT}{base}"


def template_strings(path: Path) -> Iterator[str]:
    template = engines["django"].from_string(path.read_text(encoding="utf-8")).template  # type: ignore[attr-defined]
    for node in template.nodelist.get_nodes_by_type(TranslateNode):
        message = _literal(node.filter_expression)
        if message is not None:
            yield _key(message, context=_literal(node.message_context))
    for node in template.nodelist.get_nodes_by_type(BlockTranslateNode):
        singular, _ = node.render_token_list(node.singular)
        plural = node.render_token_list(node.plural)[0] if node.plural else None
        yield _key(singular, context=_literal(node.message_context), plural=plural)


def _name(function: ast.expr) -> str | None:
    if isinstance(function, ast.Name):
        return function.id
    if isinstance(function, ast.Attribute):
        return function.attr
    return None


def _strings(*nodes: ast.expr) -> list[str] | None:
    """The string literals, or None when any argument is not one (a variable, an f-string)."""
    values = [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return values if len(values) == len(nodes) else None


def python_strings(path: Path) -> Iterator[str]:
    for call in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(call, ast.Call) or not call.args:
            continue
        name, args = _name(call.func), call.args
        if name in _GETTEXT and (found := _strings(args[0])):
            yield _key(found[0])
        elif name in _PGETTEXT and len(args) >= 2 and (found := _strings(*args[:2])):
            yield _key(found[1], context=found[0])
        elif name in _NGETTEXT and len(args) >= 2 and (found := _strings(*args[:2])):
            yield _key(found[0], plural=found[1])
        elif name in _NPGETTEXT and len(args) >= 3 and (found := _strings(*args[:3])):
            yield _key(found[1], context=found[0], plural=found[2])


def marked_strings() -> dict[str, str]:
    """Every message marked for translation -> where (the first place it is used)."""
    found: dict[str, str] = {}
    for directory in TEMPLATE_DIRS:
        for path in sorted(directory.rglob("*.html")):
            for key in template_strings(path):
                found.setdefault(key, str(path.relative_to(ROOT)))
    for directory in PYTHON_DIRS:
        for path in sorted(directory.rglob("*.py")):
            if "migrations" not in path.parts:
                for key in python_strings(path):
                    found.setdefault(key, str(path.relative_to(ROOT)))
    return found


class _Reader(HTMLParser):
    SKIPPED = {"script", "style", "code", "pre", "kbd", "samp", "svg", "template"}
    READ_ATTRIBUTES = ("title", "aria-label", "placeholder", "alt")
    VOID = {
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "source",
        "track",
        "wbr",
    }

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page_language = "en"
        self.stack: list[bool] = []  # per open element: is its content skipped?
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "html":
            self.page_language = (attributes.get("lang") or "en").lower()
        language = (attributes.get("lang") or "").lower()
        skipped = (
            (bool(self.stack) and self.stack[-1])
            or tag in self.SKIPPED
            or attributes.get("translate") == "no"
            or (bool(language) and tag != "html" and language != self.page_language)
        )
        if not skipped:
            self.texts += [v for k, v in attrs if k in self.READ_ATTRIBUTES and v]
            if (
                tag == "input"
                and attributes.get("type") in ("submit", "button")
                and attributes.get("value")
            ):
                self.texts.append(str(attributes["value"]))
        if tag not in self.VOID:
            self.stack.append(skipped)

    def handle_endtag(self, tag: str) -> None:
        if tag not in self.VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not (self.stack and self.stack[-1]) and data.strip():
            self.texts.append(data.strip())


def visible_text(html: str) -> tuple[str, list[str]]:
    """(the page's language, the pieces of text a reader sees)."""
    reader = _Reader()
    reader.feed(html)
    return reader.page_language, reader.texts


def english_phrases(texts: list[str]) -> list[str]:
    return [match for text in texts for match in ENGLISH_PHRASE.findall(text)]


def chinese_texts(texts: list[str]) -> list[str]:
    return [text for text in texts if CHINESE.search(text)]
