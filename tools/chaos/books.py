"""The books after the run, as plain data: what the checker holds the history against.

``books_read()`` reads the shop's tables and the provider's (the sandbox keeps
its own tables in the same database; a real provider's would be read from its
settlement report). The checker only sees these dataclasses, so its tests
build books by hand.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

# A charge settled this long after it was written was a late success (answered
# DECLINED, succeeded later). An ordinary charge is written already settled, so
# its paid_at precedes its created_at; the nemesis arms late_success with at
# least a second of delay.
LATE_SETTLEMENT = timedelta(seconds=0.5)


@dataclass(frozen=True)
class OrderBook:
    number: str
    user: str
    status: str  # UNPAID, PAID, CANCELLED, REFUNDED
    amount: int
    refunded_amount: int
    create_key: str | None
    captures: tuple[int, ...]  # amounts of its `capture` ledger entries
    shipments: int
    lines: tuple[tuple[str, int], ...]  # (sku, quantity)
    # What refunds that went through and then failed at the provider (refund_reversal)
    # took back out of refunded_amount: the customer was told refunded, and the books
    # say the money came back to the shop (docs/design.md, "Money that moves after the
    # fact"). Never more than a refund the customer was told about.
    reversed: int = 0


@dataclass(frozen=True)
class AttemptBook:
    """One pay attempt, in the shop's books and at the provider."""

    out_trade_no: str
    order: str
    status: str  # the shop's: PENDING, SUCCEEDED, FAILED, UNKNOWN, ORPHANED
    provider_status: str | None  # SUCCESS, DECLINED, CLOSED; None: no charge
    provider_net: int  # captured minus refunded at the provider
    late_success: bool


@dataclass(frozen=True)
class KeyBook:
    """The idempotency record of (user, key), and what it made."""

    finished: bool
    response_status: int | None
    order: str | None  # the order it made or acted on
    attempt: str | None  # the pay attempt's out_trade_no


@dataclass(frozen=True)
class CaseBook:
    """A case of the operator's desk, and who acted on it."""

    id: int
    kind: str
    state: str  # open, resolved
    resolved_by: str | None  # the person who closed it; None: the machine (or still open)
    resolution: str
    acted_by: tuple[str, ...]  # everyone with an action on its record


@dataclass(frozen=True)
class Books:
    orders: dict[str, OrderBook]
    attempts: dict[str, AttemptBook]
    keys: dict[tuple[str, str], KeyBook]  # (username, key)
    wallets: dict[str, tuple[int, int]]  # payer -> (charged_total, refunded_total)
    # username -> captured - refunded + reversed - disputed + reinstated, every kind of entry
    ledger_net: dict[str, int]
    products: dict[str, tuple[int, int]]  # sku -> (stock, received)
    unresolved: list[str] = field(default_factory=list)  # what is still in flight
    cases: list[CaseBook] = field(default_factory=list)
    audit_exit: int = 0
    audit_output: str = ""
    # payer -> what disputes gave back to them (dispute_lost): the wallet's net debit
    # is charged - refunded - disputed.
    disputed: dict[str, int] = field(default_factory=dict)


def books_read(*, received: dict[str, int], audit: tuple[int, str]) -> Books:
    """Read the books from the database (Django must be set up on the run's database)."""
    from demo.sandbox.models import Charge, Wallet
    from idempotency.models import IdempotencyKey, RecoveryPoint
    from orders.models import Order, OrderLine, Product, Shipment
    from payments.models import MONEY_IN_KINDS, LedgerEntry, LedgerKind, Payment, Refund
    from reconcile.desk.models import Case, CaseAction

    shipments = Counter(Shipment.objects.values_list("order__number", flat=True))
    captures: dict[str, list[int]] = defaultdict(list)
    reversed_: Counter[str] = Counter()
    net: Counter[str] = Counter()
    for number, username, kind, amount in LedgerEntry.objects.values_list(
        "order__number", "order__user__username", "kind", "amount"
    ):
        if kind == LedgerKind.CAPTURE:
            captures[number].append(amount)
        if kind == LedgerKind.REFUND_REVERSAL:
            reversed_[number] += amount
        net[username] += amount if kind in MONEY_IN_KINDS else -amount
    lines: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for number, sku, quantity in OrderLine.objects.values_list("order__number", "sku", "quantity"):
        lines[number].append((sku, quantity))
    orders = {
        number: OrderBook(
            number=number,
            user=username,
            status=status,
            amount=amount,
            refunded_amount=refunded,
            create_key=key,
            captures=tuple(captures[number]),
            shipments=shipments[number],
            lines=tuple(lines[number]),
            reversed=reversed_[number],
        )
        for number, username, status, amount, refunded, key in Order.objects.values_list(
            "number", "user__username", "status", "amount", "refunded_amount", "idempotency_key"
        )
    }
    charges = {charge.out_trade_no: charge for charge in Charge.objects.select_related("dispute")}
    attempts = {}
    payment_refs: dict[int, tuple[str, str]] = {}
    for pk, ref, number, status in Payment.objects.values_list(
        "pk", "out_trade_no", "order__number", "status"
    ):
        payment_refs[pk] = (ref, number)
        charge = charges.get(ref)
        attempts[ref] = AttemptBook(
            out_trade_no=ref,
            order=number,
            status=status,
            provider_status=charge.status if charge else None,
            provider_net=_net(charge),
            late_success=_late(charge),
        )
    order_numbers = dict(Order.objects.values_list("pk", "number"))
    refund_orders = dict(Refund.objects.values_list("pk", "payment__order__number"))
    keys = {}
    for record in IdempotencyKey.objects.select_related("user").exclude(resource_id=None):
        order, attempt = None, None
        assert record.resource_id is not None
        if record.resource_type == "order":
            order = order_numbers.get(record.resource_id)
        elif record.resource_type == "payment" and record.resource_id in payment_refs:
            attempt, order = payment_refs[record.resource_id]
        elif record.resource_type == "refund":
            order = refund_orders.get(record.resource_id)
        keys[(record.user.username, record.key)] = KeyBook(
            finished=record.recovery_point == RecoveryPoint.FINISHED,
            response_status=record.response_status,
            order=order,
            attempt=attempt,
        )
    unresolved = [
        f"idempotency record {user}/{key} still at {point}"
        for user, key, point in IdempotencyKey.objects.exclude(
            recovery_point=RecoveryPoint.FINISHED
        ).values_list("user__username", "key", "recovery_point")
    ]
    live = [Payment.Status.PENDING, Payment.Status.UNKNOWN]
    unresolved += [
        f"payment {ref} still {status}"
        for ref, status in Payment.objects.filter(status__in=live).values_list(
            "out_trade_no", "status"
        )
    ]
    unresolved += [
        f"refund {ref} still {status}"
        for ref, status in Refund.objects.filter(status__in=live).values_list("refund_no", "status")
    ]
    acted: dict[int, set[str]] = defaultdict(set)
    for case_id, by_name in CaseAction.objects.values_list("case_id", "by_name"):
        acted[case_id].add(by_name)
    cases = [
        CaseBook(
            id=pk,
            kind=kind,
            state=state,
            resolved_by=resolved_by,
            resolution=resolution,
            acted_by=tuple(sorted(acted[pk])),
        )
        for pk, kind, state, resolved_by, resolution in Case.objects.values_list(
            "pk", "kind", "state", "resolved_by__username", "resolution"
        )
    ]
    return Books(
        orders=orders,
        cases=cases,
        attempts=attempts,
        keys=keys,
        wallets={
            payer: (charged, refunded)
            for payer, charged, refunded in Wallet.objects.values_list(
                "payer", "charged_total", "refunded_total"
            )
        },
        ledger_net=dict(net),
        products={
            sku: (stock, received.get(sku, 0))
            for sku, stock in Product.objects.values_list("sku", "stock")
        },
        unresolved=unresolved,
        audit_exit=audit[0],
        audit_output=audit[1],
        disputed=dict(Wallet.objects.values_list("payer", "disputed_total")),
    )


def _net(charge: Any) -> int:
    """What the provider kept of a charge: captured minus refunded (a refund reversed
    no longer counts) minus what a dispute gave back (0 if never captured)."""
    if charge is None or charge.status != "SUCCESS":
        return 0
    dispute = getattr(charge, "dispute", None)
    disputed = dispute.withdrawn - dispute.reinstated if dispute is not None else 0
    return int(charge.amount or 0) - int(charge.refunded_total) - disputed


def _late(charge: Any) -> bool:
    return (
        charge is not None
        and charge.status == "SUCCESS"
        and charge.paid_at is not None
        and charge.paid_at - charge.created_at > LATE_SETTLEMENT
    )
