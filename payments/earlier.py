"""How many earlier attempts a request asks the provider about before its own call.

Before a new attempt at the same money (a pay after declined charges, a refund
after declined refunds) the request asks the provider whether an earlier
attempt was carried out late after all (docs/design.md, "Late outcomes").
It asks while it holds its Idempotency-Key's lock, so the asking must fit in
that lock's budget:

- one provider call takes at most ``2 * PROVIDER_TIMEOUT_S`` (a connect and a
  read timeout, each PROVIDER_TIMEOUT_S);
- a lock older than IDEMPOTENCY_LOCK_TIMEOUT is presumed dead and may be taken
  over by a retry, which would then run the same key's flow beside ours;
- after asking, the request still makes its own call (one more provider call)
  and two short transactions.

So the earlier attempts asked about are the newest ones first, at most
``MAX_EARLIER_ASKED``, and fewer when the lock could not cover them: the asks,
the request's own call and one PROVIDER_TIMEOUT_S of margin stay within
IDEMPOTENCY_LOCK_TIMEOUT (defaults: 60 s; 3 asks of at most 10 s, 10 s for the
own call, 5 s margin). A wall clock checks the same budget as the asks go, so a
provider that answers slowly (within its timeout each time) stops the asking
early rather than stretching it. An attempt beyond the bound is not forgotten:
its late success still reaches the shop by notification or statement, and is
booked by the reconciler (as an orphaned capture, refunded, if the order was
paid meanwhile by another attempt).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from django.conf import settings

T = TypeVar("T")

# The newest earlier attempts asked about at most: a customer who retried more
# often than this has older attempts settled by the reconciler, not by the request.
MAX_EARLIER_ASKED = 3

# The clock (a module attribute, so a test can make time run out).
_monotonic = time.monotonic


def _call_worst_s() -> float:
    return 2 * settings.PROVIDER_TIMEOUT_S  # connect, then read


def earlier_asks_allowed() -> int:
    """How many earlier attempts fit in the key lock's budget (see the module)."""
    reserved = _call_worst_s() + settings.PROVIDER_TIMEOUT_S  # our own call, a margin
    fit = int((settings.IDEMPOTENCY_LOCK_TIMEOUT - reserved) // _call_worst_s())
    return max(0, min(MAX_EARLIER_ASKED, fit))


def within_lock_budget(newest_first: Iterable[T]) -> Iterator[T]:
    """The earlier attempts to ask about, in the order given, while the budget lasts."""
    allowed = earlier_asks_allowed()
    deadline = _monotonic() + allowed * _call_worst_s()
    for asked, attempt in enumerate(newest_first):
        if asked >= allowed or _monotonic() + _call_worst_s() > deadline + 1e-9:
            return
        yield attempt
