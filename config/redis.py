"""The process's one Redis client (throttle counters, checkout tokens, runner locks)."""

import functools

import redis
from django.conf import settings


@functools.cache
def redis_client() -> redis.Redis:
    """One client, and so one thread-safe connection pool, per process.

    REDIS_URL may be a ``unix://`` socket (the embedded Redis); redis-py's
    ``from_url`` understands both. Short timeouts: a Redis that does not answer
    is an error to report, not a request to hang.
    """
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
