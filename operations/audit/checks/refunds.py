"""Refunds, orphaned captures and notifications (invariants 6 and 7 of docs/design.md).

Refunds of an order never exceed its capture, its ``refunded_amount`` is what
its refund entries add up to less their reversals (a refund that failed after
it succeeded gave nothing back), and a REFUNDED order got all of it back;
what a dispute gave back counts with the refunds against the capture, never in
``refunded_amount``. An orphaned capture is given back in full (refunds less
reversals, plus what a dispute took) once the reconciler had its time. Every
notification the shop could not apply is resolved once the reconciler had its
time. Things younger than RECONCILE_AFTER_S are in flight, not findings.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, F, OuterRef, Q, Subquery, Sum
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Coalesce

from callbacks.models import UNRESOLVED_OUTCOMES, ProviderNotification
from edge.money import money
from operations.audit.checks import AuditContext, Checked
from operations.audit.findings import Finding
from orders.models import Order
from payments.models import (
    REFUND_KINDS,
    REVERSAL_KINDS,
    UNSETTLED_REFUND_STATUSES,
    LedgerEntry,
    Payment,
    PaymentStatus,
    Refund,
)

REFUNDS_WITHIN_CAPTURE = "order-refunds-within-its-capture"
REFUNDED_ORDER_REFUNDED_IN_FULL = "refunded-order-refunded-in-full"
SUCCEEDED_REFUND_BOOKED = "succeeded-refund-is-booked"
REFUND_SETTLED = "refund-not-left-unsettled"
ORPHAN_REFUNDED = "orphaned-capture-refunded-in-full"
NOTIFICATION_RESOLVED = "notification-not-left-unresolved"


def _entries_total(kind: str, *, field: str) -> Coalesce:
    """SUM(amount) of the ledger entries of ``kind`` for the row's ``field`` (order/payment)."""
    entries = LedgerEntry.objects.filter(**{field: OuterRef("pk")}, kind=kind)
    summed = entries.values(field).annotate(total=Sum("amount")).values("total")
    return Coalesce(Subquery(summed), 0)


def _disputed(*, field: str) -> CombinedExpression:
    """What disputes took back from the row's capture, less what they reinstated."""
    return _entries_total(LedgerEntry.Kind.DISPUTE_WITHDRAWAL, field=field) - _entries_total(
        LedgerEntry.Kind.DISPUTE_REINSTATEMENT, field=field
    )


def orders(ctx: AuditContext) -> Checked:
    """Refund entries less reversals of an order = its refunded_amount; with what disputes
    took, within its capture; REFUNDED = all of it."""
    rows = Order.objects.annotate(
        captured=_entries_total(LedgerEntry.Kind.CAPTURE, field="order"),
        refunded=_entries_total(LedgerEntry.Kind.REFUND, field="order")
        - _entries_total(LedgerEntry.Kind.REFUND_REVERSAL, field="order"),
        disputed=_disputed(field="order"),
    ).filter(
        Q(refunded__gt=0)
        | Q(refunded_amount__gt=0)
        | Q(status=Order.Status.REFUNDED)
        | Q(disputed__gt=0)
    )
    findings = [
        Finding(
            REFUNDS_WITHIN_CAPTURE,
            f"order {o['number']}: refunds booked {money(o['refunded'], o['currency'])} "
            f"(less reversals), refunded_amount {money(o['refunded_amount'], o['currency'])}, "
            f"disputed {money(o['disputed'], o['currency'])}, "
            f"captured {money(o['captured'], o['currency'])}",
            {"order": o["pk"], "number": o["number"]},
        )
        for o in rows.filter(
            ~Q(refunded=F("refunded_amount"))
            | Q(refunded__gt=F("captured") - F("disputed"))
            | Q(disputed__lt=0)
        )
        .order_by("pk")
        .values("pk", "number", "refunded", "refunded_amount", "disputed", "captured", "currency")
    ]
    findings += [
        Finding(
            REFUNDED_ORDER_REFUNDED_IN_FULL,
            f"order {o['number']} is REFUNDED with {money(o['refunded'], o['currency'])} "
            f"of {money(o['amount'], o['currency'])} refunded",
            {"order": o["pk"], "number": o["number"]},
        )
        for o in rows.filter(status=Order.Status.REFUNDED)
        .exclude(refunded=F("amount"))
        .order_by("pk")
        .values("pk", "number", "refunded", "amount", "currency")
    ]
    return rows.count(), findings


def refund_attempts(ctx: AuditContext) -> Checked:
    """A SUCCEEDED refund has its ledger entry, a REVERSED one its entry and its reversal;
    none is left unsettled past the reconciler."""
    booked = LedgerEntry.objects.filter(refund_attempt=OuterRef("pk"), kind__in=REFUND_KINDS)
    reversed_ = LedgerEntry.objects.filter(refund_attempt=OuterRef("pk"), kind__in=REVERSAL_KINDS)
    unbooked = Refund.objects.filter(
        Q(status=Refund.Status.SUCCEEDED) & (~Exists(booked) | Exists(reversed_))
        | Q(status=Refund.Status.REVERSED) & (~Exists(booked) | ~Exists(reversed_))
    )
    findings = [
        Finding(
            SUCCEEDED_REFUND_BOOKED,
            f"refund {r['refund_no']} {r['status']} without its ledger entry "
            "(a refund entry, and for a reversed one its reversal)",
            {"refund": r["pk"], "payment": r["payment_id"]},
        )
        for r in unbooked.order_by("pk").values("pk", "refund_no", "status", "payment_id")
    ]
    due_before = ctx.now - timedelta(seconds=settings.RECONCILE_AFTER_S)
    findings += [
        Finding(
            REFUND_SETTLED,
            f"refund {r['refund_no']} still {r['status']} after {r['reconcile_attempts']} tries",
            {"refund": r["pk"], "payment": r["payment_id"]},
        )
        for r in Refund.objects.filter(
            status__in=UNSETTLED_REFUND_STATUSES, updated_at__lt=due_before
        )
        .order_by("pk")
        .values("pk", "refund_no", "status", "reconcile_attempts", "payment_id")
    ]
    # An orphaned capture is refunded by the reconciler's passes after it was booked;
    # a refund reversed gave nothing back, a dispute lost gave it back another way.
    orphans = Payment.objects.filter(status=PaymentStatus.ORPHANED).annotate(
        captured=_entries_total(LedgerEntry.Kind.ORPHAN_CAPTURE, field="payment"),
        refunded=_entries_total(LedgerEntry.Kind.ORPHAN_REFUND, field="payment")
        - _entries_total(LedgerEntry.Kind.ORPHAN_REFUND_REVERSAL, field="payment")
        + _disputed(field="payment"),
    )
    stale = orphans.filter(
        settled_at__lt=due_before - timedelta(seconds=settings.RECONCILE_AFTER_S)
    )
    findings += [
        Finding(
            ORPHAN_REFUNDED,
            f"orphaned capture of {p['out_trade_no']}: captured "
            f"{money(p['captured'], p['currency'])}, refunded "
            f"{money(p['refunded'], p['currency'])} ({p['failure_code']})",
            {"payment": p["pk"], "order": p["order_id"], "out_trade_no": p["out_trade_no"]},
        )
        for p in stale.exclude(refunded=F("captured"))
        .order_by("pk")
        .values(
            "pk", "order_id", "out_trade_no", "captured", "refunded", "currency", "failure_code"
        )
    ]
    return Refund.objects.count() + orphans.count(), findings


def notifications(ctx: AuditContext) -> Checked:
    """No notification is left deferred, rejected or unmatched without a resolution."""
    due_before = ctx.now - timedelta(seconds=settings.RECONCILE_AFTER_S)
    open_ = ProviderNotification.objects.filter(
        outcome__in=UNRESOLVED_OUTCOMES, resolved_at__isnull=True
    )
    findings = [
        Finding(
            NOTIFICATION_RESOLVED,
            f"notification {n['notify_id']} ({n['event']} {n['out_trade_no']} "
            f"{n['trade_status']}) left {n['outcome']}: {n['reason'] or '-'}",
            {"notification": n["pk"], "payment": n["payment_id"], "refund": n["refund_attempt_id"]},
        )
        for n in open_.filter(received_at__lt=due_before)
        .order_by("pk")
        .values(
            "pk",
            "notify_id",
            "event",
            "out_trade_no",
            "trade_status",
            "outcome",
            "reason",
            "payment_id",
            "refund_attempt_id",
        )
    ]
    return open_.count(), findings
