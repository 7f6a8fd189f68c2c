"""``OnceShopClient``: the shop's API with the key discipline built in.

One intent, one key: every unsafe call (create an order, pay, cancel) takes a
``key``; without one it makes a new UUID v4, and every retry of that call
sends the same key. Retries follow ``retry.RetryPolicy``. A 2xx returns a
``Reply``; a final answer raises ``Problem`` (the server's problem+json code,
and whether it was a replay); a budget spent without a final answer raises
``GaveUp``, which carries the key so the caller can come back with it later.

One client per thread: it keeps a ``requests.Session`` (connection reuse), and
a Session is not documented as thread-safe.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

import requests
from requests.structures import CaseInsensitiveDict

from onceshop_client.models import Line, Order, Product
from onceshop_client.retry import RetryPolicy, is_retryable, parse_retry_after

T = TypeVar("T")

KEY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"

# What a lost connection or a timeout looks like to requests. Anything else it
# raises (a malformed URL, a missing schema) is a bug of the caller: not retried.
NETWORK_ERRORS: tuple[type[Exception], ...] = (
    requests.ConnectionError,  # refused, reset, closed before the answer; ConnectTimeout
    requests.Timeout,  # ReadTimeout: sent, maybe done, no answer in time
    requests.exceptions.ChunkedEncodingError,  # the answer was cut off half-way
)


def new_key() -> str:
    """A key for one new intent: 122 random bits, never a timestamp or a counter."""
    return str(uuid.uuid4())


@dataclass(frozen=True)
class Reply(Generic[T]):
    """One answer of the server, as it came off the wire."""

    status: int
    body: T
    headers: Mapping[str, str]
    key: str | None  # the Idempotency-Key the request carried (None for reads)
    attempts: int  # how many times it was sent (1 = no retry)

    @property
    def replayed(self) -> bool:
        """``Idempotent-Replayed: true``: the stored answer of an earlier request."""
        return self.headers.get(REPLAYED_HEADER, "").lower() == "true"

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def code(self) -> str:
        """The problem's stable ``code`` ("" for a success or a non-problem body)."""
        if self.ok or not isinstance(self.body, Mapping):
            return ""
        return str(self.body.get("code", ""))

    @property
    def retry_after(self) -> float | None:
        return parse_retry_after(self.headers.get("Retry-After"))


class ClientError(Exception):
    """Base of what the client raises."""


@dataclass(eq=False)  # exceptions compare (and hash) by identity
class Problem(ClientError):
    """A final answer: not retried. For an unsafe call, a new attempt needs a new key."""

    reply: Reply[Any]

    def __str__(self) -> str:
        detail = self.reply.body.get("detail", "") if isinstance(self.reply.body, Mapping) else ""
        return f"{self.reply.status} {self.reply.code or 'error'}: {detail}".strip()

    @property
    def status(self) -> int:
        return self.reply.status

    @property
    def code(self) -> str:
        return self.reply.code

    @property
    def replayed(self) -> bool:
        return self.reply.replayed


@dataclass(eq=False)
class GaveUp(ClientError):
    """The retry budget ran out with nothing final. Come back later with ``key``.

    ``last_reply`` is the last answer (a 5xx or a 409 in use), or None if the
    last attempt got no answer at all (``last_error`` says what happened).
    """

    key: str | None
    attempts: int
    last_reply: Reply[Any] | None = None
    last_error: Exception | None = field(default=None, repr=False)

    def __str__(self) -> str:
        last = (
            f"{self.last_reply.status} {self.last_reply.code}".strip()
            if self.last_reply is not None
            else type(self.last_error).__name__
        )
        return f"gave up after {self.attempts} attempts (last: {last}); retry later, same key"


class OnceShopClient:
    """The OnceShop API over HTTP, for one user (``Authorization: Token``)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        policy: RetryPolicy | None = None,
        timeout: tuple[float, float] = (3.0, 30.0),
        rng: random.Random | None = None,
        session: requests.Session | None = None,
        on_retry: Callable[[int, float, Reply[Any] | None], None] | None = None,
    ) -> None:
        """``timeout`` is (connect, read) seconds. A pay may take the provider's
        whole timeout before the shop answers 503, so the read timeout must be
        longer than that, or the client would guess where the shop knows.
        ``on_retry(attempt, delay_s, reply)`` is called before each wait."""
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.policy = policy or RetryPolicy()
        self.timeout = timeout
        self.rng = rng or random.Random()  # noqa: S311 - jitter, not a secret
        self.session = session or requests.Session()
        self.on_retry = on_retry

    # --- the API -----------------------------------------------------------------------

    def login(self, username: str, password: str) -> str:
        """Get the user's API token, and use it from now on."""
        reply = self.send(
            "POST", "/api/v1/auth/token/", form={"username": username, "password": password}
        )
        self.token = str(reply.body["token"])
        return self.token

    def products(self) -> list[Product]:
        """The whole catalogue, every page of it."""
        return self._all_pages("/api/v1/products/?page_size=100")

    def orders(self) -> list[Order]:
        """The user's own orders, newest first, every page of them."""
        return self._all_pages("/api/v1/orders/?page_size=100")

    def create_order(self, lines: Sequence[Line], *, key: str | None = None) -> Reply[Order]:
        """201 with the order (stock reserved); ``Problem`` 409 ``out-of-stock``, ..."""
        body = {"lines": [{"sku": line["sku"], "quantity": line["quantity"]} for line in lines]}
        return self.send("POST", "/api/v1/orders/", json=body, key=key or new_key())

    def order(self, number: str) -> Reply[Order]:
        return self.send("GET", f"/api/v1/orders/{number}/")

    def pay(self, number: str, *, key: str | None = None) -> Reply[Order]:
        """200 with the PAID order; ``Problem`` 402 ``payment-declined``, 409
        ``order-not-payable``; a 503 ``payment-outcome-unknown`` is retried."""
        return self.send("POST", f"/api/v1/orders/{number}/pay/", key=key or new_key())

    def cancel(self, number: str, *, key: str | None = None) -> Reply[Order]:
        return self.send("POST", f"/api/v1/orders/{number}/cancel/", key=key or new_key())

    def refund(
        self, number: str, *, amount: int | None = None, reason: str = "", key: str | None = None
    ) -> Reply[Order]:
        """200 with the order (``REFUNDED`` once all of it is back); ``amount`` left
        out: the whole refundable rest. ``Problem`` 402 ``refund-declined``, 409
        ``order-not-refundable`` / ``refund-exceeds-paid``; a 503
        ``refund-outcome-unknown`` is retried with the same key."""
        body: dict[str, Any] = {"reason": reason}
        if amount is not None:
            body["amount"] = amount
        path = f"/api/v1/orders/{number}/refunds/"
        return self.send("POST", path, json=body, key=key or new_key())

    def _all_pages(self, path: str) -> list[Any]:
        items: list[Any] = []
        next_path: str | None = path
        while next_path is not None:
            page = self.send("GET", next_path).body
            items.extend(page["results"])
            # Follow the link's path and query only: the host it names is the one
            # the server saw, which is not ours behind a proxy.
            link = urlsplit(page["next"]) if page.get("next") else None
            next_path = f"{link.path}?{link.query}" if link is not None else None
        return items

    # --- one request, retried ----------------------------------------------------------

    def send(
        self,
        method: str,
        path: str,
        *,
        key: str | None = None,
        json: Any = None,
        form: Mapping[str, str] | None = None,
    ) -> Reply[Any]:
        """Send until a final answer or the end of the budget; every try carries ``key``."""
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        if key is not None:
            headers[KEY_HEADER] = key
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            reply: Reply[Any] | None = None
            error: Exception | None = None
            try:
                response = self.session.request(
                    method,
                    self.base_url + path,
                    json=json,
                    data=form,
                    headers=headers,
                    timeout=self.timeout,
                    allow_redirects=False,
                )
            except NETWORK_ERRORS as failed:
                # It may or may not have arrived, and may or may not have run:
                # only the same key can find out without risking a second effect.
                error = failed
            else:
                reply = _reply(response, key=key, attempts=attempt)
                if reply.ok:
                    return reply
                if not is_retryable(status=reply.status, code=reply.code):
                    raise Problem(reply)
            delay = self.policy.delay(
                attempt - 1, rng=self.rng, retry_after=reply.retry_after if reply else None
            )
            spent = time.monotonic() - started
            if attempt >= self.policy.max_attempts or spent + delay > self.policy.max_elapsed_s:
                raise GaveUp(key=key, attempts=attempt, last_reply=reply, last_error=error)
            if self.on_retry is not None:
                self.on_retry(attempt, delay, reply)
            time.sleep(delay)  # the backoff itself: nothing to await but time


def _reply(response: requests.Response, *, key: str | None, attempts: int) -> Reply[Any]:
    try:
        body: Any = response.json() if response.content else None
    except ValueError:
        body = response.text  # a proxy's HTML 502, say: no code, still a 5xx
    return Reply(
        status=response.status_code,
        body=body,
        # Header names are case-insensitive (and lower-case over HTTP/2).
        headers=CaseInsensitiveDict(response.headers),
        key=key,
        attempts=attempts,
    )
