"""Stock (invariant 3 of docs/design.md): three ways of counting it must agree.

For every product: the ``stock`` column (what orders reserve from), the sum of
its inventory movements (the journal), and stock received minus what orders
that are not cancelled hold. Per order, its movements must match its lines:
one reservation each, and one release exactly when it was cancelled.
"""

from __future__ import annotations

from django.db.models import Case, F, OuterRef, When

from operations.audit.checks import AuditContext, Checked, sum_of
from operations.audit.findings import Finding
from orders.models import InventoryMovement, Order, OrderLine, Product

STOCK_EQUALS_MOVEMENTS = "stock-equals-sum-of-movements"
STOCK_NON_NEGATIVE = "stock-never-negative"
STOCK_EQUALS_RECEIVED_MINUS_HELD = "stock-equals-received-minus-held"
ORDER_MOVEMENTS_MATCH_LINES = "order-movements-match-its-lines"


def products(ctx: AuditContext) -> Checked:
    """stock == sum(movements) == received - held by orders not cancelled, and >= 0."""
    movements = InventoryMovement.objects.filter(product=OuterRef("pk"))
    held = OrderLine.objects.filter(product=OuterRef("pk")).exclude(
        order__status=Order.Status.CANCELLED
    )
    rows = Product.objects.annotate(
        moved=sum_of(movements, group="product", field="quantity"),
        received=sum_of(
            movements.filter(kind=InventoryMovement.Kind.RECEIPT), group="product", field="quantity"
        ),
        held=sum_of(held, group="product", field="quantity"),
    ).values("pk", "sku", "stock", "moved", "received", "held")
    findings: list[Finding] = []
    for p in rows:
        ids: dict[str, object] = {"product": p["pk"], "sku": p["sku"]}
        expected = p["received"] - p["held"]
        if p["stock"] != p["moved"]:
            message = f"{p['sku']}: stock {p['stock']}, its movements add up to {p['moved']}"
            findings.append(Finding(STOCK_EQUALS_MOVEMENTS, message, ids))
        if p["stock"] < 0:  # the CHECK constraint forbids it; a fork might drop it
            findings.append(Finding(STOCK_NON_NEGATIVE, f"{p['sku']}: stock {p['stock']}", ids))
        if p["stock"] != expected:
            message = (
                f"{p['sku']}: stock {p['stock']}, but received {p['received']} - held by "
                f"orders not cancelled {p['held']} = {expected}"
            )
            findings.append(Finding(STOCK_EQUALS_RECEIVED_MINUS_HELD, message, ids))
    return len(rows), findings


def order_movements(ctx: AuditContext) -> Checked:
    """An order's movements add up to minus its lines, or to zero once it is cancelled."""
    orders = Order.objects.annotate(
        moved=sum_of(
            InventoryMovement.objects.filter(order=OuterRef("pk")), group="order", field="quantity"
        ),
        ordered=sum_of(
            OrderLine.objects.filter(order=OuterRef("pk")), group="order", field="quantity"
        ),
    ).annotate(expected=Case(When(status=Order.Status.CANCELLED, then=0), default=-F("ordered")))
    findings = [
        Finding(
            ORDER_MOVEMENTS_MATCH_LINES,
            f"order {o['number']} ({o['status']}) moved {o['moved']} units of stock, "
            f"expected {o['expected']}",
            {"order": o["pk"], "number": o["number"]},
        )
        for o in orders.exclude(moved=F("expected"))
        .order_by("pk")
        .values("pk", "number", "status", "moved", "expected")
    ]
    return orders.count(), findings
