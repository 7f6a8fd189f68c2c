"""Order amounts (docs/design.md, invariant 1): an order is for exactly what its lines add up to.

The amount is computed once, at creation, from the prices of the moment and
stored on the order; every charge, capture and refund is measured against it.
A line's ``unit_price`` is that same price, so ``amount == sum(unit_price x
quantity)`` holds forever unless something wrote one without the other.
"""

from __future__ import annotations

from django.db.models import BigIntegerField, ExpressionWrapper, F, OuterRef

from edge.money import money
from operations.audit.checks import AuditContext, Checked, sum_of
from operations.audit.findings import Finding
from orders.models import Order, OrderLine

ORDER_AMOUNT_MATCHES_LINES = "order-amount-equals-sum-of-lines"


def order_amounts(ctx: AuditContext) -> Checked:
    """Every order's amount equals the sum of unit_price x quantity over its lines."""
    line_total = ExpressionWrapper(F("unit_price") * F("quantity"), output_field=BigIntegerField())
    orders = Order.objects.annotate(
        lines_total=sum_of(
            OrderLine.objects.filter(order=OuterRef("pk")), group="order", field=line_total
        )
    )
    findings = [
        Finding(
            ORDER_AMOUNT_MATCHES_LINES,
            f"order {o['number']} is for {money(o['amount'], o['currency'])}, its lines add "
            f"up to {money(o['lines_total'], o['currency'])}",
            {"order": o["pk"], "number": o["number"]},
        )
        for o in orders.exclude(amount=F("lines_total"))
        .order_by("pk")
        .values("pk", "number", "amount", "currency", "lines_total")
    ]
    return orders.count(), findings
