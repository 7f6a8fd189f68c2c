"""The log context of the current request or task, in contextvars.

Every log line carries whatever is bound here (``logs.ContextFilter``), so one
grep for a request id or an ``out_trade_no`` follows a payment through the
shop, the provider, the callback, the worker and the reconciler. A context is
started per request (``middleware``) and per task (``celery``) and reset when
it ends; ``bind`` adds to it on the way as things become known.

Never bind a secret: the key itself is never bound, only ``key_hash(key)``.
"""

from __future__ import annotations

import functools
import hashlib
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

REQUEST_ID_HEADER = "X-Request-ID"
# An incoming X-Request-ID is kept only if it is a sane token: it lands in every
# log line and goes out again in headers, so no spaces, quotes or control bytes.
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{8,128}")

# Immutable: every change sets a new mapping, so a reset restores exactly the old one.
_fields: ContextVar[Mapping[str, Any]] = ContextVar(
    "onceshop_log_context", default=MappingProxyType({})
)


def new_request_id() -> str:
    return uuid.uuid4().hex


def sane_request_id(raw: str | None) -> str | None:
    """``raw`` if it is a token we are willing to log and echo, else None."""
    if raw and _SANE_REQUEST_ID.fullmatch(raw):
        return raw
    return None


def key_hash(key: str) -> str:
    """What the logs say about an Idempotency-Key: a short SHA-256, never the key.

    Unkeyed on purpose: support can hash the key a customer quotes and grep for
    it. The keys are high-entropy (docs/design.md), so the hash reveals nothing.
    """
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def start(**fields: Any) -> Token[Mapping[str, Any]]:
    """A fresh context (nothing inherited); give the token back to ``reset``."""
    return _fields.set({name: value for name, value in fields.items() if value is not None})


def reset(token: Token[Mapping[str, Any]]) -> None:
    _fields.reset(token)


def bind(**fields: Any) -> None:
    """Add to the current context until it is reset (None values are skipped)."""
    _fields.set({**_fields.get(), **{k: v for k, v in fields.items() if v is not None}})


@contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """``bind`` for the duration of a block (a reconciler's one payment)."""
    token = _fields.set({**_fields.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _fields.reset(token)


def isolated(work: Callable[P, R]) -> Callable[P, R]:
    """Whatever ``work`` binds (one record's payment) is gone when it returns."""

    @functools.wraps(work)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with bound():
            return work(*args, **kwargs)

    return run


def current() -> dict[str, Any]:
    return dict(_fields.get())


def request_id() -> str | None:
    value = _fields.get().get("request_id")
    return str(value) if value is not None else None


def outbound_headers() -> dict[str, str]:
    """Headers that carry the request id to the next hop (the provider, the merchant)."""
    rid = request_id()
    return {REQUEST_ID_HEADER: rid} if rid else {}
