"""2. A low-entropy key: the millisecond timestamp.

Many intents of one account start at once (a batch job, several tabs, a
gateway forwarding many customers of one merchant). Keyed by the millisecond
they started, intents of the same millisecond share a key: the server rightly
treats them as one request, and all but one silently get another intent's
answer — an order they did not make, and no order of their own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from idempotency.core import Outcome
from onceshop_client import new_key  # a UUID v4: 122 random bits
from orders.services import LineRequest
from tools.lab.context import Lab, at_once
from tools.lab.onceshop import order_create_once
from tools.lab.report import Finding

MISTAKE = "a low-entropy key (a millisecond timestamp)"


def timestamp_key() -> str:
    """The naive key: when the intent started, to the millisecond."""
    return str(time.time_ns() // 1_000_000)


def _intents(lab: Lab, *, label: str, make_key: Callable[[], str]) -> tuple[int, int]:
    """``concurrent_intents`` orders placed at once.

    Returns the orders in the database and the intents that got another intent's
    answer: a replay (``Idempotent-Replayed: true`` for a key they never sent), or
    409 in use (a retry, as the key discipline asks, would then get that replay).
    """
    user = lab.customer(label)
    lines = [LineRequest(sku=lab.product().sku, quantity=1)]
    # The intents start together (a burst of clients), each making its key as it
    # starts; then they are sent. (Threads of one Python process would otherwise
    # reach the clock one after the other, paced by the interpreter's lock, which
    # separate clients on separate machines are not.)
    started = threading.Barrier(lab.scale.concurrent_intents)

    def intent(_index: int) -> Outcome:
        key = make_key()  # made when the intent starts, like a real client
        started.wait()
        return order_create_once(user_id=user.pk, key=key, lines=lines)

    answers = at_once(lab.scale.concurrent_intents, intent)
    orders = lab.orders_of(user)
    others = sum(1 for a in answers if not isinstance(a, Outcome) or a.replayed)
    return orders, others


def run(lab: Lab) -> Finding:
    intents = lab.scale.concurrent_intents
    naive_orders, naive_shared = _intents(lab, label="ts-naive", make_key=timestamp_key)
    our_orders, our_shared = _intents(lab, label="ts-onceshop", make_key=new_key)
    return Finding(
        number=2,
        mistake=MISTAKE,
        naive=(
            f"{intents} intents at once: {naive_orders} orders; {naive_shared} intents "
            "silently got another intent's order"
        ),
        onceshop=f"UUID v4 keys: {our_orders} orders for {intents} intents, {our_shared} shared",
        counts={
            "intents": intents,
            "naive_orders": naive_orders,
            "naive_shared": naive_shared,
            "onceshop_orders": our_orders,
            "onceshop_shared": our_shared,
        },
    )
