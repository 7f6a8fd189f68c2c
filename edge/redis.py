"""The process's one Redis client (throttle counters, checkout tokens, runner locks).

Redis is never where money is decided (docs/design.md, "Redis down"), so each use
says what it does without it: the rate limits and quotas let the request through
(edge/throttling.py), the checkout answers 503 ``service-unavailable``
(demo/shop/services.py), the reconciler runs without its lock (reconcile/locks.py).
Each such moment is counted in ``onceshop_redis_unavailable_total``.
"""

import functools

import redis
from django.conf import settings

# A Redis that does not answer within this long is down, for this request: the
# commands here are O(1) and take well under a millisecond on loopback, so half a
# second is generous, and a frozen Redis costs a request that, not the client's
# whole timeout. (A stopped Redis refuses the connection at once.)
REDIS_TIMEOUT_S = 0.5

# What "Redis is unreachable" looks like from redis-py: refused, reset or timed out,
# and, while Redis restarts under a threaded server, a socket closed under a reader
# ("I/O operation on closed file", a ValueError: seen in the chaos run). Narrower
# than RedisError on purpose: a script error or a wrong type is a bug to see as a
# 500, not an outage to ride through.
REDIS_DOWN: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError, ValueError)


@functools.cache
def redis_client() -> redis.Redis:
    """One client, and so one thread-safe connection pool, per process.

    REDIS_URL may be a ``unix://`` socket (the embedded Redis); redis-py's
    ``from_url`` understands both.
    """
    return redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
    )
