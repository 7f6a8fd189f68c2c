"""A per-user rate limit that costs O(1) per request.

DRF's built-in ``UserRateThrottle`` keeps every request time of the window in
one cache entry and reads and rewrites the whole list on each request, so its
cost grows with the caller's traffic. This one counts requests in fixed windows:
``SET NX EX`` and ``INCR`` in one pipelined round trip to Redis, whatever the
rate. The price is the usual fixed-window edge (up to twice the rate across a
window boundary), which is fine for a guard against runaway clients.
"""

from __future__ import annotations

import time
from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from config.redis import redis_client


class UserRateThrottle(SimpleRateThrottle):
    scope = "user"

    def get_cache_key(self, request: Request, view: Any) -> str:
        ident = request.user.pk if request.user.is_authenticated else self.get_ident(request)
        return f"throttle:{self.scope}:{ident}"

    def allow_request(self, request: Request, view: Any) -> bool:
        limit, duration = self.parse_rate(self.rate)
        if limit is None or duration is None:
            return True
        now = time.time()
        key = self.window_key(request, view, now=now)
        pipe = redis_client().pipeline(transaction=False)
        pipe.set(key, 0, ex=duration + 1, nx=True)  # the window's counter, if new
        pipe.incr(key)
        _, count = pipe.execute()
        self._wait = duration - (now % duration)
        return count <= limit

    def window_key(self, request: Request, view: Any, *, now: float) -> str:
        _, duration = self.parse_rate(self.rate)
        return f"{self.get_cache_key(request, view)}:{int(now // (duration or 1))}"

    def wait(self) -> float:
        return self._wait
