"""The project's rate limits, on the O(1) counters of edge/ratelimit.py.

* ``UserRateThrottle`` (every API endpoint): per user, or per client address for
  an anonymous caller (edge/clients.py: never a client-supplied X-Forwarded-For).
* ``CallbackRateThrottle``: the provider's notifications, per source address.
* ``login_attempt_check``: the login page, the admin login and the token endpoint,
  per client address and per username, before any password is checked.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.utils.translation import gettext_noop
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from edge.clients import client_address
from edge.errors import TooManyRequests, problem_response
from edge.ratelimit import Rate, hashed, hit


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
