"""Fixed-window counters in Redis: every rate limit of the project costs O(1).

``SET NX EX`` and ``INCR`` in one pipelined round trip, whatever the rate. The
price is the usual fixed-window edge (up to twice the rate across a window
boundary), which is fine for guards against runaway or hostile clients.
DRF's own ``SimpleRateThrottle`` instead keeps every request time of the window
in one cache entry and rewrites the whole list on each request. Rates are
spelled as DRF spells them.

Without Redis every limit fails open (docs/design.md, "Redis down"): a limit is a
guard against abuse, never where money is decided, so an outage lets requests
through rather than answering 500 to all of them. Each hit let through unchecked
is logged and counted (``onceshop_redis_unavailable_total{use="rate-limit"}``,
with its alert, docs/operating.md).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass

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
