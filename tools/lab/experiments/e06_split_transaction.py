"""6. The dedupe record written in another transaction than the business row.

Two commits where one is needed: whichever goes first, a crash between them
leaves one without the other. Record first, then the order: the retry finds the
record, says "done", and the order never exists (a lost effect). The order
first, then the record: the retry finds no record and orders again (a doubled
effect). OnceShop writes the key's record in the same transaction as the order,
so a crash leaves both or neither, and the retry does the work exactly once.

The crash is real: a forked child process SIGKILLs itself between the two
steps, or inside OnceShop's phase just before its commit (``tools/lab/crash.py``);
the retry runs in the parent, after the child died.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from django.db import connection, transaction

from idempotency.models import IdempotencyKey
from orders.services import LineRequest, order_create
from tools.lab.context import Lab
from tools.lab.crash import Crash, crash_all, die, kill_before_the_record_is_written
from tools.lab.onceshop import order_create_once
from tools.lab.report import Finding
from tools.lab.tables import scratch_table

MISTAKE = "dedupe record in another transaction than the business row"
NAIVE_VARIANTS = ("record-first", "order-first")
NAIVE_TABLE = "lab_split_dedupe"
NAIVE_DDL = (
    f"CREATE TABLE {NAIVE_TABLE} (user_id bigint NOT NULL, key text NOT NULL, "
    "PRIMARY KEY (user_id, key))"
)


def naive_create(
    *,
    user_id: int,
    key: str,
    lines: Sequence[LineRequest],
    record_first: bool,
    between: Callable[[], None] = lambda: None,
) -> str:
    """Dedupe on a record, but commit the record and the order separately."""

    def remember() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {NAIVE_TABLE} VALUES (%s, %s)", [user_id, key])  # noqa: S608

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {NAIVE_TABLE} WHERE user_id = %s AND key = %s",  # noqa: S608
            [user_id, key],
        )
        if cursor.fetchone() is not None:
            return "already done"
    if record_first:
        remember()
        between()
        order_create(user_id=user_id, lines=lines, idempotency_key=None)
    else:
        order_create(user_id=user_id, lines=lines, idempotency_key=None)
        between()
        remember()
    return "done"


def run(lab: Lab) -> Finding:
    product = lab.product()
    lines = lab.one(product)
    key = "checkout-1"
    counts: dict[str, float] = {}
    users = {variant: lab.customer(variant) for variant in (*NAIVE_VARIANTS, "onceshop")}
    with scratch_table(NAIVE_TABLE, NAIVE_DDL):
        # Each variant's first request, in a process that dies half-way through it.
        crash_all(
            [
                Crash(
                    variant,
                    partial(
                        naive_create,
                        user_id=users[variant].pk,
                        key=key,
                        lines=lines,
                        record_first=variant == "record-first",
                        between=die,
                    ),
                )
                for variant in NAIVE_VARIANTS
            ]
            + [
                Crash(
                    "onceshop",
                    partial(order_create_once, user_id=users["onceshop"].pk, key=key, lines=lines),
                    hook=kill_before_the_record_is_written,
                )
            ]
        )
        for variant in NAIVE_VARIANTS:
            user = users[variant]
            # The retry, here, after the crash.
            naive_create(
                user_id=user.pk, key=key, lines=lines, record_first=variant == "record-first"
            )
            counts[f"{variant}_orders"] = lab.orders_of(user)

    ours = users["onceshop"]
    counts["onceshop_orders_after_crash"] = lab.orders_of(ours)
    retry = order_create_once(user_id=ours.pk, key=key, lines=lines)
    counts["onceshop_orders"] = lab.orders_of(ours)
    counts["onceshop_records"] = IdempotencyKey.objects.filter(user=ours).count()
    return Finding(
        number=6,
        mistake=MISTAKE,
        naive=(
            f"killed between the commits, then retried: record first → "
            f"{counts['record-first_orders']:.0f} orders (lost); order first → "
            f"{counts['order-first_orders']:.0f} orders (doubled)"
        ),
        onceshop=(
            f"one transaction: killed → {counts['onceshop_orders_after_crash']:.0f} orders, "
            f"retry → {counts['onceshop_orders']:.0f} order ({retry.status})"
        ),
        counts=counts,
        holds={
            "the crash left no order": counts["onceshop_orders_after_crash"] == 0,
            "the retry made one order": counts["onceshop_orders"] == 1,
            "one key record": counts["onceshop_records"] == 1,
        },
    )
