"""Orders, payments, ledger and shipments (invariants 1 and 5 of DESIGN.md section 9)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Count, F, Q

from orders.models import Order, Shipment
from payments.models import UNSETTLED_STATUSES, LedgerEntry, Payment, PaymentStatus
from reconcile.checks import AuditContext, Checked
from reconcile.findings import Finding

PAID_ORDER_ONE_PAYMENT = "paid-order-has-one-succeeded-payment"
PAID_ORDER_ONE_CAPTURE = "paid-order-has-one-capture-of-its-amount"
CAPTURE_ONLY_PAID = "capture-only-for-paid-orders"
CAPTURE_MATCHES_PAYMENT = "capture-matches-its-payment"
SUCCEEDED_CAPTURED = "succeeded-payment-is-captured"
PAYMENT_SETTLED = "payment-not-left-unsettled"
PAID_ORDER_SHIPPED = "paid-order-has-a-shipment"
SHIPMENT_ONLY_PAID = "shipment-only-for-paid-orders"


def paid_orders(ctx: AuditContext) -> Checked:
    """A PAID order has exactly one SUCCEEDED payment and one capture of its amount."""
    paid = Order.objects.filter(status=Order.Status.PAID)
    succeeded = Count("payments", filter=Q(payments__status=PaymentStatus.SUCCEEDED))
    findings = [
        Finding(
            PAID_ORDER_ONE_PAYMENT,
            f"order {o['number']} is PAID with {o['succeeded']} SUCCEEDED payments",
            {"order": o["pk"], "number": o["number"]},
        )
        for o in paid.annotate(succeeded=succeeded)
        .exclude(succeeded=1)
        .values("pk", "number", "succeeded")
    ]
    uncaptured = paid.filter(
        Q(ledger_entry__isnull=True)
        | ~Q(ledger_entry__amount=F("amount"))
        | ~Q(ledger_entry__currency=F("currency"))
    )
    findings += [
        Finding(
            PAID_ORDER_ONE_CAPTURE,
            f"order {o['number']} is PAID for {o['amount']} {o['currency']}, captured "
            f"{o['ledger_entry__amount']} {o['ledger_entry__currency']}",
            {"order": o["pk"], "number": o["number"], "ledger_entry": o["ledger_entry__pk"]},
        )
        for o in uncaptured.values(
            "pk",
            "number",
            "amount",
            "currency",
            "ledger_entry__pk",
            "ledger_entry__amount",
            "ledger_entry__currency",
        )
    ]
    return paid.count(), findings


def ledger(ctx: AuditContext) -> Checked:
    """No order but a PAID one has a capture; a capture matches its SUCCEEDED payment."""
    entries = LedgerEntry.objects.all()
    findings = [
        Finding(
            CAPTURE_ONLY_PAID,
            f"capture {e['trade_no']} belongs to order {e['order__number']}, "
            f"which is {e['order__status']}",
            {"ledger_entry": e["pk"], "order": e["order_id"], "number": e["order__number"]},
        )
        for e in entries.exclude(order__status=Order.Status.PAID).values(
            "pk", "trade_no", "order_id", "order__number", "order__status"
        )
    ]
    mismatched = entries.exclude(
        payment__status=PaymentStatus.SUCCEEDED,
        payment__order_id=F("order_id"),
        payment__trade_no=F("trade_no"),
        payment__amount=F("amount"),
        payment__currency=F("currency"),
    )
    findings += [
        Finding(
            CAPTURE_MATCHES_PAYMENT,
            f"capture {e['trade_no']} of {e['amount']} {e['currency']} does not match its "
            f"payment ({e['payment__status']}, {e['payment__trade_no']}, "
            f"{e['payment__amount']} {e['payment__currency']})",
            {"ledger_entry": e["pk"], "payment": e["payment_id"], "order": e["order_id"]},
        )
        for e in mismatched.values(
            "pk",
            "trade_no",
            "amount",
            "currency",
            "order_id",
            "payment_id",
            "payment__status",
            "payment__trade_no",
            "payment__amount",
            "payment__currency",
        )
    ]
    findings += [
        Finding(
            SUCCEEDED_CAPTURED,
            f"payment {p['out_trade_no']} SUCCEEDED without a capture",
            {"payment": p["pk"], "order": p["order_id"], "out_trade_no": p["out_trade_no"]},
        )
        for p in Payment.objects.filter(
            status=PaymentStatus.SUCCEEDED, ledger_entry__isnull=True
        ).values("pk", "order_id", "out_trade_no")
    ]
    return entries.count(), findings


def unsettled_payments(ctx: AuditContext) -> Checked:
    """After reconciliation, no attempt is left PENDING or UNKNOWN."""
    # Younger ones may still be in a request's hands; older ones were the
    # reconciler's to settle, and it could not (provider unreachable, a conflict).
    due_before = ctx.in_flight_since
    findings = [
        Finding(
            PAYMENT_SETTLED,
            f"payment {p['out_trade_no']} still {p['status']} after {p['reconcile_attempts']} "
            "tries: the provider's answer is not known",
            {"payment": p["pk"], "order": p["order_id"], "out_trade_no": p["out_trade_no"]},
        )
        for p in Payment.objects.filter(status__in=UNSETTLED_STATUSES, updated_at__lt=due_before)
        .order_by("pk")
        .values("pk", "order_id", "out_trade_no", "status", "reconcile_attempts")
    ]
    return Payment.objects.count(), findings


def shipments(ctx: AuditContext) -> Checked:
    """One shipment per PAID order (the unique column says at most one), none for others."""
    # The sweep ships what the on-commit task missed after FULFIL_SWEEP_AFTER_S.
    paid_before = ctx.now - timedelta(seconds=settings.FULFIL_SWEEP_AFTER_S)
    paid = Order.objects.filter(status=Order.Status.PAID)
    findings = [
        Finding(
            PAID_ORDER_SHIPPED,
            f"order {o['number']} is PAID and has no shipment",
            {"order": o["pk"], "number": o["number"]},
        )
        for o in paid.filter(shipment__isnull=True, paid_at__lt=paid_before).values("pk", "number")
    ]
    findings += [
        Finding(
            SHIPMENT_ONLY_PAID,
            f"order {s['order__number']} is {s['order__status']} and has a shipment",
            {"shipment": s["pk"], "order": s["order_id"], "number": s["order__number"]},
        )
        for s in Shipment.objects.exclude(order__status=Order.Status.PAID).values(
            "pk", "order_id", "order__number", "order__status"
        )
    ]
    return paid.count(), findings
