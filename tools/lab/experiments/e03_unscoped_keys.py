"""3. Keys not scoped per user.

Two apps number their requests with their own counter (``order-1``, ...), or
two users' clients happen to pick the same key. A dedupe table keyed by the
key alone makes them one request: the second user is served the first user's
stored answer — someone else's order, address and amount.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction

from orders.models import Order
from orders.serializers import OrderOutputSerializer
from orders.services import LineRequest, order_create
from tools.lab.context import Lab
from tools.lab.onceshop import order_create_once
from tools.lab.report import Finding
from tools.lab.tables import scratch_table

MISTAKE = "keys not scoped per user"
KEY = "order-1"  # each app's first request, from its own counter

# The naive dedupe table: the key alone is the primary key.
NAIVE_TABLE = "lab_unscoped_keys"
NAIVE_DDL = f"CREATE TABLE {NAIVE_TABLE} (key text PRIMARY KEY, order_id bigint NOT NULL)"


def naive_create(*, user_id: int, key: str, lines: Sequence[LineRequest]) -> dict[str, Any]:
    """Replay the key's order if the key was seen (by anyone); else order, and remember."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SELECT order_id FROM {NAIVE_TABLE} WHERE key = %s", [key])  # noqa: S608
        if (row := cursor.fetchone()) is not None:
            return dict(OrderOutputSerializer(Order.objects.get(pk=row[0])).data)
        order = order_create(user_id=user_id, lines=lines, idempotency_key=None)
        cursor.execute(f"INSERT INTO {NAIVE_TABLE} VALUES (%s, %s)", [key, order.pk])  # noqa: S608
        return dict(OrderOutputSerializer(order).data)


def _theirs(answer: dict[str, Any], user_id: int) -> bool:
    """Whether the order in the answer belongs to somebody else."""
    return not Order.objects.filter(number=answer["number"], user_id=user_id).exists()


def run(lab: Lab) -> Finding:
    lines = lab.one(lab.product())
    alice, bob = lab.customer("scope-a"), lab.customer("scope-b")

    with scratch_table(NAIVE_TABLE, NAIVE_DDL):
        naive_create(user_id=alice.pk, key=KEY, lines=lines)
        bob_naive = naive_create(user_id=bob.pk, key=KEY, lines=lines)
        naive_bob_orders = lab.orders_of(bob)

    carol, dave = lab.customer("scope-c"), lab.customer("scope-d")
    answers: dict[int, Any] = {}
    for user in (carol, dave):
        answers[user.pk] = order_create_once(user_id=user.pk, key=KEY, lines=lines).body
    dave_orders = lab.orders_of(dave)
    naive_leak = int(_theirs(bob_naive, bob.pk))
    our_leak = int(_theirs(answers[dave.pk], dave.pk))
    return Finding(
        number=3,
        mistake=MISTAKE,
        naive=(
            f"two users, key {KEY!r}: the second was served the first user's order "
            f"({naive_leak} leak) and has {naive_bob_orders} orders"
        ),
        onceshop=(
            f"scope (user, key): the second got its own order ({dave_orders}), {our_leak} leaks"
        ),
        counts={
            "naive_leaks": naive_leak,
            "naive_second_user_orders": naive_bob_orders,
            "onceshop_leaks": our_leak,
            "onceshop_second_user_orders": dave_orders,
        },
        holds={"no leak": our_leak == 0, "the second user has its own order": dave_orders == 1},
    )
