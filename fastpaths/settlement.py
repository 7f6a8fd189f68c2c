"""Agrees with ``payments.services.payment_settle``: many attempts settled at once, in SQL.

That function settles one attempt in one transaction; for every answer this
module accepts, it must write the same rows (attempt, ledger entry, order), and
``tests/fastpaths/test_settlement.py`` runs both on the same cases. The batched
reconcile pass (``fastpaths/reconcile.py``) is its one caller.

``payment_settle`` settles one attempt in its own transaction, about ten
statements each. A reconcile pass over thousands of unknown attempts
(a provider outage leaves that many) spends most of its time there, one round
trip after another, while the provider could answer far faster. This is the
same settlement for a whole batch of answers, in one transaction of four
statements whatever the batch's size:

1. lock the batch's orders, in id order (``SELECT ... ORDER BY id FOR UPDATE``):
   the one lock order every writer uses (``payments/locks.py``, spelled here in
   SQL), the order row before its payment, so a batch never deadlocks with a
   pay, a cancel, a callback or another batch;
2. move the attempts: one conditional ``UPDATE ... FROM unnest(...) WHERE
   status IN (PENDING, UNKNOWN) RETURNING``, the batch form of the settle's own
   conditional UPDATE: an attempt a callback or a retry settled first is not
   touched, and is simply not returned;
3. book a capture ledger entry for every attempt that moved to SUCCEEDED (one
   multi-row INSERT; the same unique indexes refuse a second capture);
4. move those orders UNPAID -> PAID (one conditional UPDATE, ``WHERE status =
   'UNPAID'``, as the state machine's own transition).

Only the plain, common answers come here: SUCCESS for the attempt's own
reference and amount on an UNPAID order, DECLINED, CLOSED. Everything else (an
answer that names another reference or amount, a capture the order can no
longer take, an attempt someone settled first) is left to the caller, who
settles it one by one with ``payment_settle``, so every such case
keeps its one tested path (conflicts, orphaned captures, already settled).

All or nothing: if any statement fails (a unique index refusing a capture that
a bug above let through, a lost connection), the whole batch rolls back and
raises, and the caller settles its answers one by one, where the failure
belongs to the one attempt that caused it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from orders.models import Order
from payments.models import UNSETTLED_STATUSES, LedgerEntry, Payment, PaymentStatus
from payments.providers import ChargeResult, ChargeStatus
from payments.services import CLOSED_BY_RECONCILIATION, fulfilment_enqueue_many

_PAYMENTS = Payment._meta.db_table
_ORDERS = Order._meta.db_table

# Identifiers come from the models; every value is a bound parameter, one array
# per column, so the text is the same for a batch of 1 or of 500.
_LOCK_ORDERS = f'SELECT id, status FROM "{_ORDERS}" WHERE id = ANY(%s) ORDER BY id FOR UPDATE'  # noqa: S608
# The settle's own UPDATE for each attempt (payments.services._settle): a success
# takes the provider's trade_no and clears any failure code; a failure keeps the
# trade_no it has unless the provider named one. Conditional on the attempt being
# unsettled still, which is what makes settling it twice impossible.
_MOVE_PAYMENTS = f"""
    UPDATE "{_PAYMENTS}" AS p
    SET status = v.status, failure_code = v.failure_code,
        trade_no = COALESCE(v.trade_no, p.trade_no), settled_at = %s, updated_at = %s
    FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[])
        AS v(id, status, failure_code, trade_no)
    WHERE p.id = v.id AND p.status = ANY(%s)
    RETURNING p.id
"""  # noqa: S608
# The UNPAID -> PAID of ``payments.services._settle``, for many orders at once.
_MARK_PAID = f"""
    UPDATE "{_ORDERS}" AS o SET status = %s, paid_at = v.paid_at
    FROM unnest(%s::bigint[], %s::timestamptz[]) AS v(id, paid_at)
    WHERE o.id = v.id AND o.status = %s
    RETURNING o.id
"""  # noqa: S608


class BatchNotApplied(Exception):
    """A step of the batch did not do what its locks promised: rolled back whole."""


def payment_settle_many(*, answers: Sequence[tuple[Payment, ChargeResult]]) -> dict[int, Payment]:
    """Settle the plain answers of a batch together (see the module); the rest is yours.

    ``answers``: each attempt as the reconciler claimed it, with the provider's
    query (or fence) answer about it. Returns the attempts this settled, by id,
    as they now are; any attempt not returned was not touched, and its answer is
    for ``payment_settle``. Raises (having changed nothing) if the batch failed.
    """
    plain = [(payment, result) for payment, result in answers if _plain(payment, result)]
    if not plain:
        return {}
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_LOCK_ORDERS, [sorted({payment.order_id for payment, _ in plain})])
        unpaid = {order_id for order_id, status in cursor.fetchall() if status == "UNPAID"}
        # A capture for an order that is no longer UNPAID is an orphan to account
        # for, one by one. (The order rows are locked now: no status can change.)
        changes = {
            payment.pk: _changes(result)
            for payment, result in plain
            if result.status is not ChargeStatus.SUCCESS or payment.order_id in unpaid
        }
        cursor.execute(
            _MOVE_PAYMENTS,
            [
                now,
                now,
                list(changes),
                [change["status"] for change in changes.values()],
                [change["failure_code"] for change in changes.values()],
                [change["trade_no"] for change in changes.values()],
                [str(status) for status in UNSETTLED_STATUSES],
            ],
        )
        moved = {row[0] for row in cursor.fetchall()}  # the others were settled meanwhile
        captures = [
            (payment, result)
            for payment, result in plain
            if payment.pk in moved and result.status is ChargeStatus.SUCCESS
        ]
        if captures:
            _book_captures(captures, now=now)
    # Committed: the claimed rows now say what the database says.
    return {
        payment.pk: _as_settled(payment, changes[payment.pk], now)
        for payment, _ in plain
        if payment.pk in moved
    }


def _plain(payment: Payment, result: ChargeResult) -> bool:
    """An answer the batch may apply: about this attempt, and a success for its amount."""
    if result.out_trade_no != payment.out_trade_no:
        return False  # never applied to this attempt: payment_settle reports it
    if result.status is ChargeStatus.SUCCESS:
        return bool(result.trade_no) and (result.amount, result.currency) == (
            payment.amount,
            payment.currency,
        )
    return result.status in (ChargeStatus.DECLINED, ChargeStatus.CLOSED)


def _changes(result: ChargeResult) -> dict[str, str | None]:
    """What the settlement writes on the attempt (as ``payments.services._settle``)."""
    if result.status is ChargeStatus.SUCCESS:
        return {"status": PaymentStatus.SUCCEEDED, "failure_code": "", "trade_no": result.trade_no}
    failure = result.decline_reason or (
        CLOSED_BY_RECONCILIATION if result.status is ChargeStatus.CLOSED else "declined"
    )
    return {"status": PaymentStatus.FAILED, "failure_code": failure, "trade_no": result.trade_no}


def _as_settled(payment: Payment, changes: dict[str, str | None], now: datetime) -> Payment:
    payment.status = str(changes["status"])
    payment.failure_code = str(changes["failure_code"])
    payment.trade_no = changes["trade_no"] or payment.trade_no
    payment.settled_at = payment.updated_at = now
    return payment


def _book_captures(captures: list[tuple[Payment, ChargeResult]], *, now: datetime) -> None:
    """The ledger entries and the UNPAID -> PAID moves of the attempts that succeeded."""
    # Unique per order, per attempt and per trade_no: a second capture fails the
    # INSERT, and the batch with it (never ON CONFLICT DO NOTHING: an attempt
    # SUCCEEDED without its own entry would be a hole in the books).
    entries = []
    for payment, result in captures:
        assert result.trade_no, "a plain success names its charge (_plain)"
        entries.append(
            LedgerEntry(
                order_id=payment.order_id,
                payment_id=payment.pk,
                trade_no=result.trade_no,
                amount=payment.amount,
                currency=payment.currency,
            )
        )
    LedgerEntry.objects.bulk_create(entries)
    with connection.cursor() as cursor:
        cursor.execute(
            _MARK_PAID,
            [
                Order.Status.PAID,
                [payment.order_id for payment, _ in captures],
                [result.paid_at or now for _, result in captures],
                Order.Status.UNPAID,
            ],
        )
        paid = {row[0] for row in cursor.fetchall()}
    if len(paid) != len(captures):
        # The orders were locked and read UNPAID above; two captures for one order
        # in a batch would be the only way here, and the ledger's index stops that
        # first. Never half-applied: roll the batch back, settle one by one.
        raise BatchNotApplied(f"{len(captures) - len(paid)} order(s) could not become PAID")
    # As the single settle: only after COMMIT, and robust (the sweep ships an order
    # whose message was lost). One message for the batch: a message per order was a
    # broker round trip each, in the pass's one thread.
    order_ids = [payment.order_id for payment, _ in captures]
    transaction.on_commit(fulfilment_enqueue_many(order_ids), robust=True)
