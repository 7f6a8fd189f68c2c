"""The retry schedule and the retry decision: pure functions, no server."""

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from onceshop_client import RetryPolicy, is_retryable
from onceshop_client.retry import parse_retry_after


def test_the_schedule_is_capped_exponential_with_full_jitter():
    policy = RetryPolicy(max_attempts=8, base_s=1.0, cap_s=8.0)

    assert [policy.ceiling(n) for n in range(7)] == [1, 2, 4, 8, 8, 8, 8]
    schedule = policy.schedule(rng=random.Random(42))
    assert len(schedule) == 7  # one wait between each two of the 8 attempts
    assert schedule == policy.schedule(rng=random.Random(42))  # a seed replays it
    assert all(0 <= wait <= policy.ceiling(n) for n, wait in enumerate(schedule))


def test_full_jitter_spreads_waits_over_the_whole_range():
    # Full jitter draws from [0, ceiling], not [ceiling/2, ceiling]: clients that
    # failed together come back spread over the whole window.
    policy = RetryPolicy(base_s=1.0, cap_s=8.0)
    waits = [policy.delay(3, rng=random.Random(seed)) for seed in range(200)]

    assert min(waits) < 0.1 * 8
    assert max(waits) > 0.9 * 8
    assert 3 < sum(waits) / len(waits) < 5  # about half the ceiling on average


def test_retry_after_is_a_floor_never_shortened_by_the_jitter():
    policy = RetryPolicy(base_s=0.1, cap_s=1.0)

    assert all(policy.delay(0, rng=random.Random(s), retry_after=2) == 2 for s in range(50))
    assert policy.delay(0, rng=random.Random(1), retry_after=None) <= 0.1


def test_huge_retry_numbers_do_not_overflow():
    assert RetryPolicy(cap_s=30).ceiling(5000) == 30


def test_retry_after_as_seconds_or_http_date():
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    assert parse_retry_after("2") == 2.0
    assert (
        parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now=now) == 30
    )
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize(
    ("status", "code", "retry"),
    [
        (500, "internal-error", True),
        (502, "", True),  # a proxy's answer, no problem body
        (503, "payment-outcome-unknown", True),
        (503, "lock-timeout", True),
        (409, "idempotency-key-in-use", True),
        (409, "concurrent-update", True),
        (409, "order-not-payable", False),
        (409, "out-of-stock", False),
        (402, "payment-declined", False),
        (422, "idempotency-key-mismatch", False),
        (400, "validation-error", False),
        (404, "not-found", False),
        (429, "throttled", False),
    ],
)
def test_what_is_retried_with_the_same_key(status, code, retry):
    assert is_retryable(status=status, code=code) is retry
