"""One strict JSON reader for every body the service takes: the API's and the callbacks'.

Python's ``json`` accepts more than a server should, and fails in ways that are
not ``ValueError``:

- it reads UTF-16 and UTF-32 as readily as UTF-8 (RFC 8259 allows only UTF-8
  between systems), so a body could parse here and not be storable as text;
- ``NaN``, ``Infinity`` and ``1e400`` (which overflows to ``inf``) become floats
  that no canonical JSON, column or fingerprint can hold;
- ``"\\ud800"`` decodes to a lone surrogate: a ``str`` that is not Unicode
  text and cannot be encoded to UTF-8, so PostgreSQL and hashing both refuse it;
- its decoder recurses per nesting level: ``[[[[...`` 30,000 deep raises
  ``RecursionError``, which nothing upstream expects.

``loads`` refuses all of these with a 400 and a code, so nothing past it ever
sees such a value. The decoder itself stops at Python's recursion limit (C code
checks it, so that is a clean ``RecursionError``, caught here); the parsed value
is then held to ``MAX_JSON_DEPTH``. The walks that check depth and surrogates
run only when the text could hold what they look for: most bodies are parsed at
the cost of ``json.loads`` and a scan or two of the text.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django.utils.translation import gettext_noop
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from edge.errors import ApplicationError

# Deepest nesting of arrays and objects a body may have. Our deepest legitimate body
# (an order: object > lines array > line object) is 3; 32 leaves room for any
# sane client while keeping the decoder far from Python's recursion limit.
MAX_JSON_DEPTH = 32

_SURROGATE = re.compile("[\ud800-\udfff]")
# Strict UTF-8 decoding lets no surrogate through, so a lone one can only come from
# an escape in the text: no such escape, no surrogate to look for.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class MalformedJson(ApplicationError):
    """The body is not UTF-8 JSON text (syntax, encoding, lone surrogates, huge integers)."""

    code = "malformed-json"
    title = gettext_noop("Malformed JSON")
    default_detail = "The request body is not valid UTF-8 JSON."


class JsonTooDeep(ApplicationError):
    """Arrays and objects nested deeper than ``MAX_JSON_DEPTH``."""

    code = "json-too-deep"
    title = gettext_noop("JSON nested too deep")
    default_detail = f"The request body nests arrays or objects deeper than {MAX_JSON_DEPTH}."


class JsonNumberNotFinite(ApplicationError):
    """``NaN``, ``Infinity``, or a number too large for a double (``1e400``)."""

    code = "json-number-not-finite"
    title = gettext_noop("JSON number not finite")
    default_detail = "The request body holds NaN, Infinity or a number too large to represent."


def _refuse_constant(name: str) -> float:
    raise JsonNumberNotFinite(f"The request body holds {name}, which JSON does not allow.")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise JsonNumberNotFinite(f"The number {literal[:40]} is too large to represent.")
    return value


def _check_depth(container: dict[str, Any] | list[Any], depth: int = 1) -> None:
    """No array or object nested deeper than ``MAX_JSON_DEPTH`` (the top one is 1)."""
    for child in container.values() if isinstance(container, dict) else container:
        if isinstance(child, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise JsonTooDeep()
            _check_depth(child, depth + 1)


def _check_text(value: Any) -> None:
    """Every string and object key is Unicode text: no lone surrogate."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise MalformedJson("The request body holds a lone surrogate (\\ud800-\\udfff).")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key)
            _check_text(item)
    elif isinstance(value, list):
        for item in value:
            _check_text(item)


def loads(raw: bytes) -> Any:
    """Parse ``raw`` as UTF-8 JSON, or raise one of this module's 400 errors."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise MalformedJson("The request body is not UTF-8.") from error
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError as error:
        raise JsonTooDeep() from error
    except ValueError as error:  # syntax, a BOM, or an integer past the 4,300-digit limit
        raise MalformedJson(f"The request body is not valid JSON: {error}"[:300]) from error
    # Each walk only when the text could hold what it looks for (both are cheap checks).
    if isinstance(value, dict | list) and text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        _check_depth(value)
    if _SURROGATE_ESCAPE.search(text):
        _check_text(value)
    return value


class StrictJSONParser(BaseParser):
    """DRF's parser for ``application/json``, through ``loads`` (the API's default)."""

    media_type = "application/json"
    renderer_class = JSONRenderer

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return loads(stream.read() if stream is not None else b"")


class StrictContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, except that a body's ``Content-Type`` must be a concrete type.

    DRF matches a parser's type against the request's as it would match an
    ``Accept`` header, so ``Content-Type: */*`` (or ``application/*``) would be read
    as JSON. A body says what it is; a wildcard says nothing: 415
    ``unsupported-media-type``, like any type the endpoint does not read.
    """

    def select_parser(self, request: Request, parsers: Any) -> Any:
        if "*" in request.content_type.split(";", 1)[0]:
            return None
        return super().select_parser(request, parsers)
