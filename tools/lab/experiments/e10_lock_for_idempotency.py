"""10. A distributed lock taken for idempotency.

A lock says "one at a time", not "once". Two submits of the same intent that
do not overlap — the retry comes after the first finished, as retries do —
each take the lock in turn (the first released it), and each does the work.
The lock here is OnceShop's own single-runner lock (``reconcile/locks.py``:
SET NX PX, Lua compare-and-delete): correct as a lock, and still no dedupe.
OnceShop remembers the outcome under the key instead, so the second replays.
"""

from __future__ import annotations

from collections.abc import Sequence

from orders.services import LineRequest, order_create
from reconcile.locks import single_runner
from tools.lab.context import Lab
from tools.lab.onceshop import order_create_once
from tools.lab.report import Finding

MISTAKE = "a distributed lock taken for idempotency"


def naive_create(*, user_id: int, key: str, lines: Sequence[LineRequest]) -> bool:
    """Only one request with this key at a time, under a Redis lock."""
    with single_runner(name=f"lab-order-{user_id}-{key}", ttl_s=30) as mine:
        if not mine:
            return False  # a concurrent duplicate: refused
        order_create(user_id=user_id, lines=lines, idempotency_key=None)
        return True


def run(lab: Lab) -> Finding:
    lines = lab.one(lab.product())
    key = "checkout-1"

    naive = lab.customer("lock-naive")
    for _submit in range(2):  # one after the other
        naive_create(user_id=naive.pk, key=key, lines=lines)

    ours = lab.customer("lock-onceshop")
    outcomes = [order_create_once(user_id=ours.pk, key=key, lines=lines) for _submit in range(2)]
    naive_orders = lab.orders_of(naive)
    our_orders = lab.orders_of(ours)
    return Finding(
        number=10,
        mistake=MISTAKE,
        naive=f"2 sequential submits under a Redis lock: {naive_orders} orders",
        onceshop=(
            f"the key's stored outcome: {our_orders} order, the second "
            f"{'replayed' if outcomes[1].replayed else 'ran again'}"
        ),
        counts={"naive_orders": naive_orders, "onceshop_orders": our_orders},
        holds={"one order, the second replayed": our_orders == 1 and outcomes[1].replayed},
    )
