"""A small HTTP client of the shop's own API, for the chaos panel's bursts.

The panel acts like a real client on purpose: it reaches the running shop over
loopback at ``SHOP_BASE_URL`` with a user's token, exactly as a mobile app or a
payment gateway would, and reads every answer (status, body,
``Idempotent-Replayed``) off the wire. It fires one request per thread with no
retries of its own (a burst is the point), so it needs none of the published
client's retry policy; the story uses that client (``demo/shop/story/wire.py``).
The timeouts below are shared with it.
"""

from __future__ import annotations

from typing import Any

import requests
from django.conf import settings

from demo.shop.answers import Answer


class ShopUnreachable(Exception):
    """Nothing answers at the shop's base URL (the demo is not running there)."""


def read_timeout_s() -> float:
    # A pay request can legitimately take the provider's whole timeout before it
    # answers 503, plus its database work: wait well past that, or we would time
    # out on the shop and report a guess instead of its answer.
    return float(settings.PROVIDER_TIMEOUT_S) + 25.0


# Refused connections fail at once; this only bounds a SYN to a host that is down.
CONNECT_TIMEOUT_S = 3.0


class ShopClient:
    """``Authorization: Token <key>`` requests against ``base_url`` (no session, no CSRF)."""

    def __init__(self, *, base_url: str | None = None, token: str | None = None) -> None:
        self.base_url = (base_url or settings.SHOP_BASE_URL).rstrip("/")
        self.headers = {"Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Token {token}"

    def request(
        self,
        method: str,
        path: str,
        *,
        key: str | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        sent = {**self.headers, **(headers or {})}
        if key is not None:
            sent["Idempotency-Key"] = key
        try:
            # No Session: the chaos burst calls this from many threads at once, and a
            # requests.Session is not documented as thread-safe.
            response = requests.request(
                method,
                self.base_url + path,
                json=json,
                headers=sent,
                timeout=(CONNECT_TIMEOUT_S, read_timeout_s()),
                allow_redirects=False,
            )
        except requests.ConnectionError as error:
            raise ShopUnreachable(
                f"The shop at {self.base_url} is not reachable ({type(error).__name__}). "
                "Start it with `make demo`, or point SHOP_BASE_URL at it."
            ) from error
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = {"detail": response.text[:200]}
        return Answer.from_http(status=response.status_code, headers=response.headers, body=body)

    def get(self, path: str) -> Answer:
        return self.request("GET", path)

    def post(self, path: str, *, key: str | None = None, json: Any = None, **kwargs: Any) -> Answer:
        return self.request("POST", path, key=key, json=json, **kwargs)
