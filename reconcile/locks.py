"""The single-runner lock: at most one pass of each kind at a time, across processes.

Two beats (a deploy that briefly runs two), or beat and a manual
``manage.py reconcile --once``, would otherwise run the same pass side by side.
The lock is one Redis key per job:

- taken with ``SET key token NX PX ttl``: atomic, so of two runners exactly one
  gets it, and it expires by itself if its holder dies;
- given back with a Lua compare-and-delete, so a runner whose lock already
  expired (and was taken by the next runner) cannot delete the new holder's
  lock. ``GET`` then ``DEL`` from Python would have exactly that race.

A lock is not idempotency: it can expire under a runner that stalls past its
TTL. The row claims in the services (``FOR UPDATE SKIP LOCKED``, leases,
conditional updates) are what make an overlap harmless; the lock only keeps
runners from wasting work on each other. That is also why a Redis that does not
answer skips the lock instead of the job (docs/design.md, "Redis down"): the pass
runs on its row claims alone, logged and counted
(``onceshop_redis_unavailable_total{use="runner-lock"}``).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings

from edge.redis import REDIS_DOWN, redis_client
from observability.metrics.instruments import observe_redis_unavailable

logger = logging.getLogger(__name__)

# Deletes the key only if it still holds our token; returns 1 if it did, else 0.
# One script, so the compare and the delete are one atomic step inside Redis.
RELEASE_SCRIPT = """
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
end
return 0
"""

# 128 random bits: no other runner can guess (or by chance hold) the same token.
TOKEN_BYTES = 16


@dataclass(frozen=True)
class RunnerLock:
    """A lock we hold: its Redis key and the token that proves it is ours."""

    key: str
    token: str


def lock_key(name: str) -> str:
    """The Redis key of job ``name``.

    Scoped by database name: two shops (or two test runs) sharing one Redis guard
    different tables, and must not keep each other from running.
    """
    database = settings.DATABASES["default"]["NAME"]
    return f"onceshop:{database}:runner:{name}"


def lock_acquire(*, name: str, ttl_s: float | None = None) -> RunnerLock | None:
    """Take the lock of job ``name`` for ``ttl_s`` (RECONCILE_LOCK_TTL_S); None if held."""
    ttl = settings.RECONCILE_LOCK_TTL_S if ttl_s is None else ttl_s
    lock = RunnerLock(key=lock_key(name), token=secrets.token_hex(TOKEN_BYTES))
    taken = redis_client().set(lock.key, lock.token, nx=True, px=max(1, round(ttl * 1000)))
    return lock if taken else None


def lock_release(*, lock: RunnerLock) -> bool:
    """Give the lock back if it is still ours. False: it expired (and maybe moved on)."""
    released = redis_client().eval(RELEASE_SCRIPT, 1, lock.key, lock.token)
    return bool(released)


@contextmanager
def single_runner(*, name: str, ttl_s: float | None = None) -> Iterator[bool]:
    """``with single_runner(name=...) as mine:`` run the job only if ``mine``.

    Released on the way out whatever happens (an exception, Ctrl-C); if the
    process dies instead, the TTL frees the lock. Without Redis, ``mine`` is
    true and no lock is held: skipping the pass would stop the reconciler for
    as long as the outage lasts, while running it beside another runner only
    repeats work the row claims keep from being done twice.
    """
    try:
        lock = lock_acquire(name=name, ttl_s=ttl_s)
    except REDIS_DOWN as error:
        observe_redis_unavailable(use="runner-lock")
        logger.warning("job %s runs without its lock: redis %s", name, type(error).__name__)
        yield True
        return
    try:
        yield lock is not None
    finally:
        if lock is not None:
            try:
                lock_release(lock=lock)
            except REDIS_DOWN as error:
                # Redis went away during the pass: its TTL frees the lock instead.
                logger.warning("job %s lock not released: redis %s", name, type(error).__name__)
