"""9. Check-then-act (先查再改) against a conditional update.

The naive pay reads the order's status, and if it says UNPAID, debits the
customer and marks the order PAID. Between the read and the write there is a
window, and every concurrent pay that reads inside it sees UNPAID too: each
debits. OnceShop never decides on a value it read earlier: the pay takes the
order's row lock, one live attempt per order is a partial unique index, and
UNPAID -> PAID is ``UPDATE ... WHERE status = 'UNPAID'``.

50 pays of one order at once, each its own intent (several tabs, a script).
"""

from __future__ import annotations

import uuid

from django.db import connection

from demo.sandbox.models import Charge
from orders.services import order_create
from payments.models import LedgerEntry
from tools.lab.context import Lab, at_once
from tools.lab.onceshop import order_pay_once
from tools.lab.report import Finding
from tools.lab.tables import count, scratch_table

MISTAKE = "check-then-act instead of a conditional update"
ORDERS, DEBITS = "lab_check_orders", "lab_check_debits"
ORDERS_DDL = f"CREATE TABLE {ORDERS} (id bigint PRIMARY KEY, status text NOT NULL, amount bigint)"
DEBITS_DDL = f"CREATE TABLE {DEBITS} (id bigserial PRIMARY KEY, order_id bigint NOT NULL)"


def naive_pay(order_id: int) -> bool:
    """Read the status, then act on what was read."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT status FROM {ORDERS} WHERE id = %s", [order_id])  # noqa: S608
        (status,) = cursor.fetchone() or (None,)
        if status != "UNPAID":
            return False
        cursor.execute(f"INSERT INTO {DEBITS} (order_id) VALUES (%s)", [order_id])  # noqa: S608
        cursor.execute(f"UPDATE {ORDERS} SET status = 'PAID' WHERE id = %s", [order_id])  # noqa: S608
    return True


def run(lab: Lab) -> Finding:
    pays = lab.scale.concurrent_pays
    with scratch_table(ORDERS, ORDERS_DDL), scratch_table(DEBITS, DEBITS_DDL):
        with connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {ORDERS} VALUES (1, 'UNPAID', 1999)")  # noqa: S608
        at_once(pays, lambda _i: naive_pay(1))
        naive_debits = count(f"SELECT count(*) FROM {DEBITS}")  # noqa: S608

    user = lab.customer("pay-race")
    order = order_create(user_id=user.pk, lines=lab.one(lab.product()), idempotency_key=None)
    statuses = at_once(
        pays,  # each pay its own intent, its own key
        lambda _i: (
            order_pay_once(user_id=user.pk, key=str(uuid.uuid4()), number=order.number).status
        ),
    )
    debits = Charge.objects.filter(wallet__payer=user.username, status=Charge.Status.SUCCESS)
    our_debits = debits.count()
    entries = LedgerEntry.objects.filter(order=order).count()
    refused = sum(1 for status in statuses if status == 409)
    return Finding(
        number=9,
        mistake=MISTAKE,
        naive=f"{pays} pays of one order at once: {naive_debits} debits",
        onceshop=(
            f"row lock + conditional update: {our_debits} debit, {entries} ledger entry, "
            f"{refused} answered 409 order-not-payable"
        ),
        counts={
            "pays": pays,
            "naive_debits": naive_debits,
            "onceshop_debits": our_debits,
            "onceshop_ledger_entries": entries,
        },
        holds={
            "one debit": our_debits == 1,
            "one ledger entry": entries == 1,
            "every other pay refused": refused == pays - 1,
        },
    )
