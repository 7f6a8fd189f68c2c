"""The books page: the four tables, the provider's wallets, the audit, and what waits.

Reads only. The four tables are the article's: orders, ledger, inventory and
idempotency records; "agree" means the same numbers as the audit's invariants
(docs/design.md), shown side by side so a person can see them agree. The
verdict itself is the audit's (``operations.audit.run``), not a second audit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

import requests
from django.conf import settings
from django.db.models import BigIntegerField, Case, Count, F, Max, Q, Sum, When
from django.utils import timezone
from django.utils.translation import gettext

from callbacks.models import ProviderNotification
from demo.shop.labels import notification_outcome
from idempotency.models import IdempotencyKey, RecoveryPoint
from observability.metrics.gauges import GaugeValue, gauge_values
from operations.audit.run import audit_run
from orders.models import InventoryMovement, Order, OrderLine, Product, Shipment
from payments.models import MONEY_IN_KINDS, UNSETTLED_STATUSES, LedgerEntry, Payment
from payments.providers import KeepsWallets, get_provider
from reconcile.desk.approvals import case_awaiting_approval
from reconcile.desk.selectors import case_actions, cases_open

# The page shows the most recent payers' wallets only: each is one HTTP request to
# the provider, and the page refreshes every few seconds.
MAX_WALLETS = 20
# How many waiting items are listed (the counts are always complete).
MAX_WAITING = 20
# A books refresh must never hang on a provider that does not answer.
WALLET_TIMEOUT_S = (1.0, 3.0)


@dataclass(frozen=True)
class InventoryRow:
    sku: str
    stock: int
    received: int
    held: int  # quantities of orders that are not cancelled

    @property
    def expected(self) -> int:
        return self.received - self.held

    @property
    def agrees(self) -> bool:
        return self.stock == self.expected and self.stock >= 0


@dataclass(frozen=True)
class WalletRow:
    payer: str
    shop_paid_total: int  # the ledger's net: captured - refunded (orphans included)
    charged_total: int | None  # net: charged - refunded; None: the provider did not answer
    successes: int | None
    error: str = ""

    @property
    def agrees(self) -> bool:
        return (self.charged_total or 0) == self.shop_paid_total and not self.error


@dataclass(frozen=True)
class Waiting:
    what: str
    reference: str
    state: str
    since: datetime | None


@dataclass(frozen=True)
class GaugeRow:
    """A gauge of /metrics as the page shows it (timestamps as an age)."""

    name: str
    labels: str
    help: str
    shown: str

    @classmethod
    def of(cls, gauge: GaugeValue) -> GaugeRow:
        if gauge.name.endswith("_timestamp_seconds"):
            seconds = f"{max(0.0, time.time() - gauge.value):.0f}"
            shown = gettext("%(seconds)s s ago") % {"seconds": seconds}
        elif gauge.name.endswith("_seconds"):
            shown = gettext("%(seconds)s s") % {"seconds": f"{gauge.value:.0f}"}
        else:
            shown = f"{gauge.value:.0f}"
        labels = ", ".join(f'{name}="{value}"' for name, value in gauge.labels.items())
        return cls(gauge.name, "{" + labels + "}" if labels else "", gauge.help, shown)


@dataclass(frozen=True)
class CaseRow:
    """An open case as the page shows it, with the actions that fit it."""

    id: int
    kind: str
    reference: str
    summary: str
    opened_at: datetime
    actions: tuple[str, ...]


def open_cases() -> list[CaseRow]:
    cases = list(cases_open())
    awaiting = case_awaiting_approval([c.pk for c in cases])
    return [
        CaseRow(
            c.pk,
            c.kind,
            c.reference,
            c.summary,
            c.opened_at,
            case_actions(c, awaiting_approval=c.pk in awaiting),
        )
        for c in cases
    ]


@dataclass
class Books:
    at: datetime
    orders: dict[str, int]
    paid_amount: int
    ledger_entries: int
    ledger_amount: int
    shipments: int
    payments: dict[str, int]
    inventory: list[InventoryRow]
    records: dict[str, int]
    notifications: dict[str, int]
    wallets: list[WalletRow]
    waiting: list[Waiting]
    waiting_count: int
    audit: Any | None
    # The totals' currency, for showing them as money ("59.00 CNY"): the demo's
    # catalogue has one (orders refuse mixed currencies, 400 `mixed-currencies`).
    currency: str = "CNY"
    audit_error: str = ""
    audit_note: str = ""
    gauges: list[GaugeRow] = field(default_factory=list)
    cases: list[CaseRow] = field(default_factory=list)  # the operator's desk: open cases
    # Whether the provider keeps wallets to set beside ours (KeepsWallets): the card
    # says so when it does not, rather than "no payments yet".
    keeps_wallets: bool = True

    @property
    def inventory_agrees(self) -> bool:
        return all(row.agrees for row in self.inventory)

    @property
    def ledger_agrees(self) -> bool:
        # One capture per PAID (or REFUNDED) order, of its amount (invariant 1, in totals).
        captured_orders = self.orders.get(Order.Status.PAID, 0) + self.orders.get(
            Order.Status.REFUNDED, 0
        )
        return self.ledger_entries == captured_orders and self.ledger_amount == self.paid_amount

    @property
    def wallets_agree(self) -> bool:
        return all(row.agrees for row in self.wallets)


def _orders() -> tuple[dict[str, int], int]:
    counts = {status: 0 for status in Order.Status.values}
    for row in Order.objects.values("status").annotate(n=Count("id")):
        counts[row["status"]] = row["n"]
    captured = (Order.Status.PAID, Order.Status.REFUNDED)
    paid = Order.objects.filter(status__in=captured).aggregate(total=Sum("amount"))
    return counts, paid["total"] or 0


def _inventory() -> list[InventoryRow]:
    received = {
        row["product_id"]: row["total"]
        for row in InventoryMovement.objects.filter(kind=InventoryMovement.Kind.RECEIPT)
        .values("product_id")
        .annotate(total=Sum("quantity"))
    }
    held = {
        row["product_id"]: row["total"]
        for row in OrderLine.objects.exclude(order__status=Order.Status.CANCELLED)
        .values("product_id")
        .annotate(total=Sum("quantity"))
    }
    return [
        InventoryRow(
            sku=product.sku,
            stock=product.stock,
            received=received.get(product.pk, 0),
            held=held.get(product.pk, 0),
        )
        for product in Product.objects.order_by("sku")
    ]


def _records(now: datetime) -> dict[str, int]:
    stale_before = now - timedelta(seconds=settings.IDEMPOTENCY_LOCK_TIMEOUT)
    unfinished = ~Q(recovery_point=RecoveryPoint.FINISHED)
    return IdempotencyKey.objects.aggregate(
        finished=Count("id", filter=Q(recovery_point=RecoveryPoint.FINISHED)),
        in_progress=Count("id", filter=unfinished & Q(locked_at__gte=stale_before)),
        # Unlocked and unfinished: a 503 left it at its recovery point, waiting for a
        # same-key retry or the completer. Locked too long: its holder is presumed dead.
        waiting=Count(
            "id", filter=unfinished & (Q(locked_at__isnull=True) | Q(locked_at__lt=stale_before))
        ),
    )


def _notifications() -> dict[str, int]:
    return {
        notification_outcome(row["outcome"]): row["n"]
        for row in ProviderNotification.objects.values("outcome").annotate(n=Count("id"))
    }


def provider_wallet(payer: str) -> dict[str, Any] | None:
    """The payer's wallet as the provider reports it (``GET /v1/wallets/{payer}``).

    A window on the stand-in provider for the demo: a real provider shows this
    in its own dashboard. Over HTTP with the merchant key, like every other call
    the shop makes to it; None when the provider has no wallet for the payer.
    """
    response = requests.get(
        f"{settings.PROVIDER_BASE_URL}/v1/wallets/{quote(payer, safe='')}",
        headers={"Authorization": f"Bearer {settings.PROVIDER_API_KEY}"},
        timeout=WALLET_TIMEOUT_S,
    )
    if response.status_code == 404:
        return None
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


def _wallets() -> list[WalletRow]:
    latest = (
        Payment.objects.values("payer")
        .annotate(last=Max("created_at"))
        .order_by("-last", "payer")
        .values_list("payer", flat=True)[:MAX_WALLETS]
    )
    payers = sorted(latest)
    # Money in counts up (captures, reversed refunds, reinstated disputes), the rest
    # down (refunds, disputes' withdrawals), orphaned ones included, as the audit adds them.
    signed = Case(
        When(kind__in=MONEY_IN_KINDS, then=F("amount")),
        default=-F("amount"),
        output_field=BigIntegerField(),
    )
    paid = {
        row["payment__payer"]: row["total"] or 0
        for row in LedgerEntry.objects.filter(payment__payer__in=payers)
        .values("payment__payer")
        .annotate(total=Sum(signed))
    }
    rows: list[WalletRow] = []
    for payer in payers:
        shop_total = paid.get(payer, 0)
        try:
            wallet = provider_wallet(payer)
        except (requests.RequestException, ValueError) as error:
            rows.append(
                WalletRow(
                    payer,
                    shop_total,
                    None,
                    None,
                    gettext("provider: %(error)s") % {"error": type(error).__name__},
                )
            )
            continue
        if wallet is None:
            rows.append(WalletRow(payer, shop_total, 0, 0))
            continue
        successes = sum(1 for charge in wallet.get("charges", []) if charge["status"] == "SUCCESS")
        net = (
            int(wallet["charged_total"])
            - int(wallet.get("refunded_total", 0))
            - int(wallet.get("disputed_total", 0))
        )
        rows.append(WalletRow(payer, shop_total, net, successes))
    return rows


def waiting_for_reconciliation(*, limit: int = MAX_WAITING) -> tuple[list[Waiting], int]:
    """Unsettled payments and unfinished records: what the reconciler and completer own."""
    payments = Payment.objects.filter(status__in=UNSETTLED_STATUSES).order_by("updated_at")
    records = IdempotencyKey.objects.exclude(recovery_point=RecoveryPoint.FINISHED).order_by(
        "created_at"
    )
    items = [
        Waiting(gettext("payment"), payment.out_trade_no, payment.status, payment.updated_at)
        for payment in payments[:limit]
    ] + [
        Waiting(
            gettext("request"),
            f"{record.method} {record.path}",
            (gettext("at '%(point)s' (running)") if record.locked_at else gettext("at '%(point)s'"))
            % {"point": record.recovery_point},
            record.locked_at or record.created_at,
        )
        for record in records[:limit]
    ]
    return items, payments.count() + records.count()


def books_snapshot(*, with_wallets: bool = True, with_audit: bool = True) -> Books:
    now = timezone.now()
    orders, paid_amount = _orders()
    ledger = LedgerEntry.objects.filter(kind=LedgerEntry.Kind.CAPTURE).aggregate(
        n=Count("id"), total=Sum("amount")
    )
    payments = {status: 0 for status in Payment.Status.values}
    for row in Payment.objects.values("status").annotate(n=Count("id")):
        payments[row["status"]] = row["n"]
    waiting, waiting_count = waiting_for_reconciliation()
    keeps_wallets = isinstance(get_provider(), KeepsWallets)
    audit, audit_error = None, ""
    audit_note = "" if with_audit else gettext("The audit was not run for this view.")
    if with_audit:
        try:
            audit = audit_run()
        except Exception as error:  # shown in words on the page; the page still renders
            audit_error = gettext("The audit could not run: %(error)s") % {
                "error": f"{type(error).__name__}: {error}"
            }
    return Books(
        at=now,
        orders=orders,
        paid_amount=paid_amount,
        ledger_entries=ledger["n"],
        ledger_amount=ledger["total"] or 0,
        shipments=Shipment.objects.count(),
        payments=payments,
        inventory=_inventory(),
        records=_records(now),
        notifications=_notifications(),
        # The sandbox keeps wallets; another provider has none to show (docs/providers.md).
        wallets=_wallets() if with_wallets and keeps_wallets else [],
        keeps_wallets=keeps_wallets,
        waiting=waiting,
        waiting_count=waiting_count,
        audit=audit,
        currency=Product.objects.values_list("currency", flat=True).first() or "CNY",
        audit_error=audit_error,
        audit_note=audit_note,
        # Read after the audit above, so its findings gauge is this very run's.
        gauges=[GaugeRow.of(gauge) for gauge in gauge_values()],
        cases=open_cases(),
    )
