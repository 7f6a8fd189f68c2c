"""The hostile corpus's vocabulary: a request, and the bodies it is built from.

A case's body and path may hold ``{sku}``, ``{out_trade_no}`` and ``{number}``:
the test fills them in with its product, payment attempt and order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
BIG = 70_000  # over API_MAX_BODY_BYTES (64 KiB)
DEEP = b"[" * 5_000 + b"]" * 5_000


@dataclass(frozen=True)
class Case:
    """One hostile request and what it must get."""

    who: str  # anonymous, customer, staff, merchant, web (session), provider (signed)
    method: str
    path: str
    body: bytes = b""
    status: int | None = None  # the exact status, when there is one to expect
    code: str | None = None  # the problem's code; None for a page (an HTML answer)
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False  # no Content-Length, Transfer-Encoding: chunked, unterminated


def sender(
    who: str, method: str, path: str, headers: dict[str, str] | None = None
) -> Callable[..., Case]:
    """Cases that share a caller, a method, a path and headers."""

    def make(
        body: bytes = b"", status: int | None = None, code: str | None = None, **more: Any
    ) -> Case:
        merged = {**(headers or {}), **more.pop("headers", {})}
        return Case(who, method, path, body, status, code, headers=merged, **more)

    return make


def order_body(**line: Any) -> bytes:
    return json.dumps({"lines": [{"sku": "{sku}", "quantity": 1, **line}]}).encode()


def notification(**overrides: Any) -> bytes:
    body = {
        "notify_id": "N-corpus",
        "trade_no": "T-corpus",
        "out_trade_no": "{out_trade_no}",
        "trade_status": "SUCCESS",
        "amount": 3998,
        "currency": "CNY",
        "paid_at": "2026-11-29T09:00:00+00:00",
        **overrides,
    }
    return json.dumps(body).encode()


def charge(**overrides: Any) -> bytes:
    body = {
        "out_trade_no": "P-corpus",
        "amount": 100,
        "currency": "CNY",
        "payer": "corpus",
        "notify_url": "http://127.0.0.1:9/cb",
        **overrides,
    }
    return json.dumps(body).encode()
