"""When to retry, and how long to wait: the key discipline as code.

After an answer that says "nothing is settled yet" — no answer at all (the
connection failed or timed out), a 5xx, or a 409 saying the first request with
this key is still running (or a transaction lost a race) — the same request is
sent again with the SAME Idempotency-Key: the server replays or resumes it, it
never runs twice. Every other 4xx is final for its key: the server has stored
it (or refused the request before anything started), so sending it again only
gets the same answer; the caller decides, and a new attempt is a new intent
with a new key.

The waits are capped exponential backoff with full jitter: retry ``n`` waits a
random time in ``[0, min(cap, base * 2**n)]``, never less than the server's
``Retry-After``. The jitter spreads clients that failed together (an outage,
a deploy) so they do not come back together; the cap bounds one wait; the
budget (attempts and total time) bounds them all. ``lab`` experiment 8 shows
what happens without them. The storefront's pay button
(``demo/shop/static/storefront/pay.js``) follows the same rules in the browser.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# 409s that mean "not settled yet, same key later" (docs/design.md, "Behaviour matrix"). 503
# `lock-timeout` and `payment-outcome-unknown` are 5xx and retried as such.
RETRY_SAME_KEY_CODES = frozenset({"idempotency-key-in-use", "concurrent-update", "lock-timeout"})


def is_retryable(*, status: int, code: str) -> bool:
    """Whether an answer is worth the same request again, with the same key."""
    return status >= 500 or code in RETRY_SAME_KEY_CODES


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one intent is tried before the caller is told to come back later.

    The defaults suit an interactive client: the first retry within a quarter
    second, none later than ``cap_s`` after the previous one, and the whole
    intent given up after ``max_attempts`` tries or ``max_elapsed_s`` seconds
    (a pay that is still unknown by then is the reconciler's to settle).
    """

    max_attempts: int = 8
    max_elapsed_s: float = 60.0
    base_s: float = 0.25
    cap_s: float = 10.0

    def ceiling(self, retry: int) -> float:
        """The longest wait before retry number ``retry`` (0 is the first retry)."""
        # min() before the power would overflow: 2**retry only grows up to the cap.
        return min(self.cap_s, self.base_s * 2 ** min(retry, 62))

    def delay(self, retry: int, *, rng: random.Random, retry_after: float | None = None) -> float:
        """The wait before retry ``retry``: full jitter, at least ``retry_after``."""
        jittered = rng.uniform(0.0, self.ceiling(retry))
        return max(jittered, retry_after or 0.0)

    def schedule(self, *, rng: random.Random) -> list[float]:
        """Every wait this policy would make if no answer ever carried Retry-After."""
        return [self.delay(retry, rng=rng) for retry in range(self.max_attempts - 1)]


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP-date (RFC 9110 10.2.3)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None  # unparseable: the backoff alone decides
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
