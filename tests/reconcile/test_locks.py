"""The single-runner lock on the real Redis: one holder, released only by its owner, expiring."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from django.conf import settings

from reconcile.locks import RunnerLock, lock_acquire, lock_key, lock_release, single_runner


@pytest.fixture
def name() -> str:
    # A job name of our own: other test runs share this Redis.
    return f"test-{uuid.uuid4()}"


@pytest.fixture
def client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


def test_a_second_runner_is_refused_until_the_first_releases(name):
    first = lock_acquire(name=name, ttl_s=30)

    assert first is not None
    assert lock_acquire(name=name, ttl_s=30) is None
    assert lock_release(lock=first) is True
    second = lock_acquire(name=name, ttl_s=30)
    assert second is not None
    assert second.token != first.token
    lock_release(lock=second)


def test_only_the_owner_token_releases(name, client):
    held = lock_acquire(name=name, ttl_s=30)
    assert held is not None

    assert lock_release(lock=RunnerLock(key=held.key, token="not-the-owner")) is False

    assert client.get(held.key) == held.token.encode()
    assert len(held.token) == 32  # 128 random bits, hex
    lock_release(lock=held)


def test_the_lock_expires_and_a_late_release_cannot_free_the_next_holder(name, client):
    # Seconds, not a fraction: a loaded machine may stall between these two calls.
    first = lock_acquire(name=name, ttl_s=2)
    assert first is not None
    assert 0 < client.pttl(first.key) <= 2000

    # The first holder stalls past its TTL (awaited: the key's expiry in Redis)
    deadline = time.monotonic() + 10
    while client.exists(first.key):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    second = lock_acquire(name=name, ttl_s=30)
    assert second is not None

    assert lock_release(lock=first) is False  # compare-and-delete: not its lock any more
    assert client.get(second.key) == second.token.encode()
    lock_release(lock=second)


def test_single_runner_yields_whether_we_hold_it_and_always_releases(name, client):
    with single_runner(name=name, ttl_s=30) as outer, single_runner(name=name, ttl_s=30) as inner:
        assert (outer, inner) == (True, False)
    assert not client.exists(lock_key(name))

    with pytest.raises(RuntimeError), single_runner(name=name, ttl_s=30):
        raise RuntimeError("the pass failed")
    assert not client.exists(lock_key(name))


def test_keys_are_scoped_to_the_database(name):
    assert lock_key(name) == f"onceshop:{settings.DATABASES['default']['NAME']}:runner:{name}"
