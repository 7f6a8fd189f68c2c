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
from dataclasses import dataclass

from django.conf import settings

from idempotency.core import Outcome
from idempotency.errors import IdempotencyKeyInUse
from onceshop_client import new_key  # a UUID v4: 122 random bits
from orders.services import LineRequest
from tools.lab.context import Lab, at_once
from tools.lab.onceshop import order_create_once
from tools.lab.report import Finding

MISTAKE = "a low-entropy key (a millisecond timestamp)"


def timestamp_key() -> str:
    """The naive key: when the intent started, to the millisecond."""
    return str(time.time_ns() // 1_000_000)


@dataclass(frozen=True)
class Answers:
    """What the database and the answers say after ``intents`` orders placed at once."""

    orders: int  # orders in the database for the account
    shared: int  # intents answered with another intent's order (or its 409 in use)
    refused: int  # intents refused for what they are (the open-order cap, a 4xx, an error)


def intent_count(lab: Lab) -> int:
    """The scale's intents, never more than one account may hold unpaid orders.

    The lab runs with the caps a user has on: MAX_OPEN_ORDERS_PER_USER refuses an
    account's order past the cap with 409 too-many-open-orders, which is not a
    wrong answer but would make every intent past it go without its order.
    """
    cap = settings.MAX_OPEN_ORDERS_PER_USER
    return min(lab.scale.concurrent_intents, cap) if cap else lab.scale.concurrent_intents


def _intents(lab: Lab, *, label: str, make_key: Callable[[], str]) -> Answers:
    """``intent_count`` orders placed at once, each answer told by what it means.

    Another intent's answer is a replay (``Idempotent-Replayed: true`` for a key the
    intent never sent), or 409 idempotency-key-in-use (a retry, as the key
    discipline asks, would then get that replay). Anything else that is not the
    intent's own order is a refusal and counted apart, never as shared.
    """
    intents = intent_count(lab)
    user = lab.customer(label)
    lines = [LineRequest(sku=lab.product().sku, quantity=1)]
    # The intents start together (a burst of clients), each making its key as it
    # starts; then they are sent. (Threads of one Python process would otherwise
    # reach the clock one after the other, paced by the interpreter's lock, which
    # separate clients on separate machines are not.)
    started = threading.Barrier(intents)

    def intent(_index: int) -> Outcome:
        key = make_key()  # made when the intent starts, like a real client
        started.wait()
        return order_create_once(user_id=user.pk, key=key, lines=lines)

    answers = at_once(intents, intent)
    shared = sum(1 for answer in answers if _another_intents(answer))
    own = sum(1 for a in answers if isinstance(a, Outcome) and a.status == 201 and not a.replayed)
    return Answers(orders=lab.orders_of(user), shared=shared, refused=intents - own - shared)


def _another_intents(answer: Outcome | BaseException) -> bool:
    """A replay of a key the intent never sent, or that key still in use by another."""
    if isinstance(answer, Outcome):
        return answer.replayed
    return isinstance(answer, IdempotencyKeyInUse)


def run(lab: Lab) -> Finding:
    intents = intent_count(lab)
    naive = _intents(lab, label="ts-naive", make_key=timestamp_key)
    ours = _intents(lab, label="ts-onceshop", make_key=new_key)
    return Finding(
        number=2,
        mistake=MISTAKE,
        naive=(
            f"{intents} intents at once: {naive.orders} orders; {naive.shared} intents "
            "silently got another intent's order"
        ),
        onceshop=(
            f"UUID v4 keys: {ours.orders} orders for {intents} intents, {ours.shared} shared"
            + (f", {ours.refused} refused" if ours.refused else "")
        ),
        counts={
            "intents": intents,
            "naive_orders": naive.orders,
            "naive_shared": naive.shared,
            "naive_refused": naive.refused,
            "onceshop_orders": ours.orders,
            "onceshop_shared": ours.shared,
            "onceshop_refused": ours.refused,
        },
        holds={
            "an order for every intent": ours.orders == intents,
            "no intent got another's order": ours.shared == 0,
            "no intent refused": ours.refused == 0,
        },
    )
