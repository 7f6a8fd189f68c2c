"""Captured money: PAID orders, their payments, captures and shipments (invariants 1, 5).

The invariants are numbered in docs/design.md. The ledger holds captures and refunds
(``LedgerEntry.kind``); these checks look at the captures of orders, ``refunds.py``
at the rest.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Exists, F, OuterRef, Q, Subquery

from edge.money import money
from operations.audit.checks import AuditContext, Checked
from operations.audit.findings import Finding
from orders.models import Order, Shipment
from payments.models import UNSETTLED_STATUSES, LedgerEntry, Payment, PaymentStatus
from payments.selectors import payments_awaiting_customer

PAID_ORDER_ONE_PAYMENT = "paid-order-has-one-succeeded-payment"
PAID_ORDER_ONE_CAPTURE = "paid-order-has-one-capture-of-its-amount"
CAPTURE_ONLY_PAID = "capture-only-for-paid-orders"
CAPTURE_MATCHES_PAYMENT = "capture-matches-its-payment"
SUCCEEDED_CAPTURED = "succeeded-payment-is-captured"
PAYMENT_SETTLED = "payment-not-left-unsettled"
PAID_ORDER_SHIPPED = "paid-order-has-a-shipment"
SHIPMENT_ONLY_PAID = "shipment-only-for-paid-orders"


# A PAID order stays captured once refunded: REFUNDED orders keep their capture.
CAPTURED_ORDER_STATUSES = (Order.Status.PAID, Order.Status.REFUNDED)


def _capture_of(field: str) -> Subquery:
    """``field`` of the order's capture entry (at most one: a partial unique index)."""
    captures = LedgerEntry.objects.filter(order=OuterRef("pk"), kind=LedgerEntry.Kind.CAPTURE)
    return Subquery(captures.values(field)[:1])


def paid_orders(ctx: AuditContext) -> Checked:
    """A PAID (or REFUNDED) order has exactly one SUCCEEDED payment and one capture of
    its amount."""
    paid = Order.objects.filter(status__in=CAPTURED_ORDER_STATUSES)
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
    uncaptured = paid.annotate(
        capture_pk=_capture_of("pk"),
        capture_amount=_capture_of("amount"),
        capture_currency=_capture_of("currency"),
    ).filter(
        Q(capture_pk__isnull=True)
        | ~Q(capture_amount=F("amount"))
        | ~Q(capture_currency=F("currency"))
    )
    findings += [
        Finding(
            PAID_ORDER_ONE_CAPTURE,
            f"order {o['number']} is {o['status']} for {money(o['amount'], o['currency'])}, "
            "captured "
            + (
                money(o["capture_amount"], o["capture_currency"])
                if o["capture_pk"] is not None
                else "nothing"
            ),
            {"order": o["pk"], "number": o["number"], "ledger_entry": o["capture_pk"]},
        )
        for o in uncaptured.values(
            "pk",
            "number",
            "status",
            "amount",
            "currency",
            "capture_pk",
            "capture_amount",
            "capture_currency",
        )
    ]
    return paid.count(), findings


def ledger(ctx: AuditContext) -> Checked:
    """No order but a PAID (REFUNDED) one has a capture; a capture matches its SUCCEEDED
    payment, an orphaned capture its ORPHANED attempt."""
    entries = LedgerEntry.objects.filter(kind=LedgerEntry.Kind.CAPTURE)
    findings = [
        Finding(
            CAPTURE_ONLY_PAID,
            f"capture {e['trade_no']} belongs to order {e['order__number']}, "
            f"which is {e['order__status']}",
            {"ledger_entry": e["pk"], "order": e["order_id"], "number": e["order__number"]},
        )
        for e in entries.exclude(order__status__in=CAPTURED_ORDER_STATUSES).values(
            "pk", "trade_no", "order_id", "order__number", "order__status"
        )
    ]
    orphans = LedgerEntry.objects.filter(kind=LedgerEntry.Kind.ORPHAN_CAPTURE)
    same_charge = Q(payment__order_id=F("order_id"), payment__trade_no=F("trade_no"))
    mismatched = LedgerEntry.objects.filter(
        Q(kind=LedgerEntry.Kind.CAPTURE)
        & ~Q(
            same_charge,
            payment__status=PaymentStatus.SUCCEEDED,
            payment__amount=F("amount"),
            payment__currency=F("currency"),
        )
        # An orphaned capture books the provider's amount, which may differ from the attempt's.
        | Q(kind=LedgerEntry.Kind.ORPHAN_CAPTURE)
        & ~Q(same_charge, payment__status=PaymentStatus.ORPHANED)
    )
    findings += [
        Finding(
            CAPTURE_MATCHES_PAYMENT,
            f"capture {e['trade_no']} of {money(e['amount'], e['currency'])} does not match "
            f"its payment ({e['payment__status']}, {e['payment__trade_no']}, "
            f"{money(e['payment__amount'], e['payment__currency'])})",
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
    booked = LedgerEntry.objects.filter(
        payment=OuterRef("pk"), kind__in=[LedgerEntry.Kind.CAPTURE, LedgerEntry.Kind.ORPHAN_CAPTURE]
    )
    findings += [
        Finding(
            SUCCEEDED_CAPTURED,
            f"payment {p['out_trade_no']} {p['status']} without a capture",
            {"payment": p["pk"], "order": p["order_id"], "out_trade_no": p["out_trade_no"]},
        )
        for p in Payment.objects.filter(
            status__in=[PaymentStatus.SUCCEEDED, PaymentStatus.ORPHANED]
        )
        .exclude(Exists(booked))
        .values("pk", "order_id", "out_trade_no", "status")
    ]
    return entries.count() + orphans.count(), findings


def unsettled_payments(ctx: AuditContext) -> Checked:
    """After reconciliation, no attempt is left PENDING or UNKNOWN."""
    # Younger ones may still be in a request's hands; older ones were the
    # reconciler's to settle, and it could not (provider unreachable, a conflict).
    due_before = ctx.in_flight_since
    # One the provider holds for its customer is in flight until the reconciler fences
    # it, PAYMENT_ACTION_TIMEOUT_S after it started (plus a pass's delay).
    waiting = payments_awaiting_customer(in_flight_since=due_before).values("pk")
    findings = [
        Finding(
            PAYMENT_SETTLED,
            f"payment {p['out_trade_no']} still {p['status']} after {p['reconcile_attempts']} "
            "tries: the provider's answer is not known",
            {"payment": p["pk"], "order": p["order_id"], "out_trade_no": p["out_trade_no"]},
        )
        for p in Payment.objects.filter(status__in=UNSETTLED_STATUSES, updated_at__lt=due_before)
        .exclude(pk__in=waiting)
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
        # A refunded order may have shipped before it was refunded.
        for s in Shipment.objects.exclude(order__status__in=CAPTURED_ORDER_STATUSES).values(
            "pk", "order_id", "order__number", "order__status"
        )
    ]
    return paid.count(), findings
