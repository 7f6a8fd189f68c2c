"""The project's rate limits: fixed-window counters in Redis, each limit O(1).

* ``UserRateThrottle`` (every API endpoint): per user, or per client address for
  an anonymous caller (edge/clients.py: never a client-supplied X-Forwarded-For).
* ``CallbackRateThrottle``: the provider's notifications, per source address.
* ``login_attempt_check``: the login page, the admin login and the token endpoint,
  per client address and per username, before any password is checked.

Every limit is a counter: ``SET NX EX`` and ``INCR`` in one pipelined round trip
(``hit``), whatever the rate. The price is the usual fixed-window edge (up to
twice the rate across a window boundary), which is fine for guards against
runaway or hostile clients. DRF's own ``SimpleRateThrottle`` instead keeps every
request time of the window in one cache entry and rewrites the whole list on each
request. Rates are spelled as DRF spells them.

Without Redis every limit fails open (docs/design.md, "Redis down"): a limit is a
guard against abuse, never where money is decided, so an outage lets requests
through rather than answering 500 to all of them. Each hit let through unchecked
is logged and counted (``onceshop_redis_unavailable_total{use="rate-limit"}``,
with its alert, docs/operating.md).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.utils.translation import gettext_noop
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from edge.clients import client_address
from edge.errors import TooManyRequests, problem_response
from edge.redis import REDIS_DOWN, redis_client
from observability.metrics.instruments import observe_redis_unavailable

logger = logging.getLogger(__name__)

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# The clock windows are cut from; a module attribute, so a test can hold it still and
# never see a window end between two of its requests.
clock = time.time


@dataclass(frozen=True)
class Rate:
    limit: int
    period_s: int

    @classmethod
    def parse(cls, text: str) -> Rate | None:
        """``"30/min"`` (DRF's spelling: s, min, hour, day); empty means no limit."""
        if not text.strip():
            return None
        limit, _, period = text.strip().partition("/")
        return cls(limit=int(limit), period_s=_PERIODS[period[:1]])


def hashed(text: str) -> str:
    """A fixed-length key part for a client-chosen string (a username, say)."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def hit(key: str, rate: Rate) -> float | None:
    """Count one hit on ``key``; None if within ``rate`` (or Redis is down), else the
    seconds to wait."""
    now = clock()
    window = f"{key}:{int(now // rate.period_s)}"
    pipe = redis_client().pipeline(transaction=False)
    pipe.set(window, 0, ex=rate.period_s + 1, nx=True)  # the window's counter, if new
    pipe.incr(window)
    try:
        _, count = pipe.execute()
    except REDIS_DOWN as error:
        # Fail open: the hit is not counted, the request goes on. The key is not
        # logged: it may hold a client's address.
        observe_redis_unavailable(use="rate-limit")
        logger.warning("rate limit not checked: redis %s", type(error).__name__)
        return None
    if count <= rate.limit:
        return None
    return rate.period_s - (now % rate.period_s)


# --- The throttles -------------------------------------------------------------------


class UserRateThrottle(SimpleRateThrottle):
    scope = "user"

    def get_ident(self, request: Request | HttpRequest) -> str:
        return client_address(request)

    def get_cache_key(self, request: Request | HttpRequest, view: Any) -> str:
        ident = request.user.pk if request.user.is_authenticated else self.get_ident(request)
        return f"throttle:{self.scope}:{ident}"

    def parse_rate(self, rate: str | None) -> tuple[int | None, int | None]:
        parsed = Rate.parse(rate or "")  # empty: no limit
        return (parsed.limit, parsed.period_s) if parsed else (None, None)

    def allow_request(self, request: Request | HttpRequest, view: Any) -> bool:
        """Count the request once, however often it is checked: a replay's fast path
        (fastpaths/replay.py) checks before the view, which may check again."""
        limit, period = self.parse_rate(self.rate)
        if limit is None or period is None:
            return True
        key = self.get_cache_key(request, view)
        counted = _counted(request)
        if key not in counted:
            counted[key] = hit(key, Rate(limit=limit, period_s=period))
        wait = counted[key]
        self._wait = wait or 0.0
        return wait is None

    def wait(self) -> float:
        return self._wait


def _counted(request: Request | HttpRequest) -> dict[str, float | None]:
    """The waits this request was given, by counter (on the Django request, which
    outlives DRF's wrapper of it)."""
    django_request = request._request if isinstance(request, Request) else request
    counted: dict[str, float | None] = django_request.__dict__.setdefault("throttle_waits", {})
    return counted


class CallbackRateThrottle(UserRateThrottle):
    """Per source address, whoever signs: checked before the body is even parsed.

    Generous (CALLBACK_RATE_PER_ADDRESS): a provider retries what we refuse, so a
    429 here only delays its notifications; it stops a flood from filling the
    table of unmatched notifications or the CPU with signature checks.
    """

    scope = "callback"

    def get_rate(self) -> str:
        return str(settings.CALLBACK_RATE_PER_ADDRESS)

    def get_cache_key(self, request: Request | HttpRequest, view: Any) -> str:
        return f"throttle:{self.scope}:{client_address(request)}"


class LoginThrottled(TooManyRequests):
    """Too many login attempts from this address or for this username: try later."""

    code = "login-throttled"
    title = gettext_noop("Too many login attempts")
    default_detail = "Too many login attempts; wait before trying again."


def login_username_key(username: str) -> str:
    """The account a login attempt is counted against, whatever its spelling.

    Django's login form strips the username and normalises it to NFKC (its
    ``UsernameField``, as ``User.normalize_username`` does for a new account), so
    ``bob`` in fullwidth letters (U+FF42...), in mathematical bold (U+1D41B...)
    and plain all log in to ``bob``: each must not
    bring a budget of its own. The token endpoint's serializer only strips, so its
    spellings are among these. Case is folded on top: one budget per name, whatever
    its case.
    """
    return unicodedata.normalize("NFKC", username.strip()).lower()


def login_attempt_check(request: HttpRequest, username: str) -> None:
    """Count one login attempt; raise ``LoginThrottled`` past either limit.

    Counted before the password is checked, failed or not: the limits bound the
    guesses per minute, and a correct guess costs the same as a wrong one. The
    username is counted as the account it logs in to, hashed into the key.
    """
    limits = [
        (f"throttle:login-address:{client_address(request)}", settings.LOGIN_RATE_PER_ADDRESS),
        (
            f"throttle:login-username:{hashed(login_username_key(username))}",
            settings.LOGIN_RATE_PER_USERNAME,
        ),
    ]
    waits = [
        wait
        for key, text in limits
        if (rate := Rate.parse(text)) is not None and (wait := hit(key, rate))
    ]
    if waits:
        raise LoginThrottled(retry_after=max(waits))


def login_throttled(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Wrap a form login view (the shop's page, the admin's): throttle its POSTs."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "POST":
            try:
                login_attempt_check(request, str(request.POST.get("username", "")))
            except LoginThrottled as error:
                return problem_response(error)
        return view(request, *args, **kwargs)

    return wrapped
