"""Idempotency records (invariants 4 and 5 of docs/design.md).

A finished record points at the business object it made (an order of its
user, a payment of its user's order); a key made at most one object; and no
record stays in progress past the lock timeout once reconciliation has run.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import Count, Exists, OuterRef
from django.db.models.functions import Coalesce
from django.urls import reverse

from idempotency.models import IdempotencyKey, RecoveryPoint
from operations.audit.checks import AuditContext, Checked
from operations.audit.findings import Finding
from orders.models import Order
from payments.models import Payment, Refund
from payments.selectors import payments_awaiting_customer

RECORD_POINTS_AT_OBJECT = "record-points-at-the-object-it-made"
KEY_MADE_ONE_ORDER = "key-made-one-order"
PAYMENT_MADE_BY_ONE_KEY = "payment-made-by-one-key"
RECORD_NOT_STUCK = "record-not-stuck-in-progress"

# The kinds of object a record may name (``Respond.resource_type``).
RESOURCE_TYPES = ["order", "payment", "refund"]


def finished_records(ctx: AuditContext) -> Checked:
    """Each finished record points at what it made; one key, one object."""
    finished = IdempotencyKey.objects.filter(recovery_point=RecoveryPoint.FINISHED)
    own_order = Order.objects.filter(pk=OuterRef("resource_id"), user_id=OuterRef("user_id"))
    own_payment = Payment.objects.filter(
        pk=OuterRef("resource_id"), order__user_id=OuterRef("user_id")
    )
    # Staff may refund anyone's order: a refund record points at any order's refund.
    any_refund = Refund.objects.filter(pk=OuterRef("resource_id"), order__isnull=False)
    creations = finished.filter(resource_type="order", method="POST", path=reverse("order-list"))
    wrong = [
        (finished.filter(resource_type="order").exclude(Exists(own_order)), "a missing order"),
        (
            finished.filter(resource_type="payment").exclude(Exists(own_payment)),
            "a missing payment",
        ),
        (finished.filter(resource_type="refund").exclude(Exists(any_refund)), "a missing refund"),
        # The order a creation made carries its key (orders' own unique index).
        (
            creations.filter(Exists(own_order)).exclude(
                Exists(own_order.filter(idempotency_key=OuterRef("key")))
            ),
            "an order another key made",
        ),
        (finished.exclude(resource_type__in=["", *RESOURCE_TYPES]), "an unknown kind of object"),
        # Every successful answer made (or changed) an object, and must name it.
        (finished.filter(resource_id__isnull=True, response_status__lt=300), "nothing"),
    ]
    findings = [
        Finding(
            RECORD_POINTS_AT_OBJECT,
            f"key {r['key']!r} ({r['method']} {r['path']} -> {r['response_status']}) points "
            f"at {what}: {r['resource_type'] or '-'} {r['resource_id']}",
            {
                "record": r["pk"],
                "resource_type": r["resource_type"],
                "resource_id": r["resource_id"],
            },
        )
        for queryset, what in wrong
        for r in queryset.order_by("pk").values(
            "pk", "key", "method", "path", "response_status", "resource_type", "resource_id"
        )
    ]
    findings += [
        Finding(
            KEY_MADE_ONE_ORDER,
            f"key {o['idempotency_key']!r} of user {o['user_id']} made {o['made']} orders",
            {"user": o["user_id"], "orders": sorted(o["ids"])},
        )
        for o in Order.objects.exclude(idempotency_key=None)
        .values("user_id", "idempotency_key")
        .annotate(made=Count("pk"), ids=ArrayAgg("pk"))
        .filter(made__gt=1)
    ]
    findings += [
        Finding(
            PAYMENT_MADE_BY_ONE_KEY,
            f"payment {r['resource_id']} is named by {r['named']} idempotency records",
            {"payment": r["resource_id"], "records": sorted(r["ids"])},
        )
        for r in IdempotencyKey.objects.filter(resource_type="payment")
        .values("resource_id")
        .annotate(named=Count("pk"), ids=ArrayAgg("pk"))
        .filter(named__gt=1)
    ]
    return finished.count(), findings


def unfinished_records(ctx: AuditContext) -> Checked:
    """No record is in progress past IDEMPOTENCY_LOCK_TIMEOUT (after reconciliation)."""
    # Past the lock timeout a retry or the completer may take a record over; one
    # still unfinished after a pass is stuck: at `started` (nothing to resume, the
    # completer reports it), or waiting on a payment the provider cannot tell us.
    stale_before = ctx.now - timedelta(seconds=settings.IDEMPOTENCY_LOCK_TIMEOUT)
    unfinished = IdempotencyKey.objects.exclude(recovery_point=RecoveryPoint.FINISHED)
    # A pay whose attempt the provider holds for its customer (answered 202) waits by
    # design until the customer acts or the reconciler fences it.
    waiting = payments_awaiting_customer(in_flight_since=ctx.in_flight_since).values("pk")
    stuck = (
        unfinished.annotate(since=Coalesce("locked_at", "created_at"))
        .filter(since__lt=stale_before)
        .exclude(resource_type="payment", resource_id__in=waiting)
    )
    findings = [
        Finding(
            RECORD_NOT_STUCK,
            f"key {r['key']!r} ({r['method']} {r['path']}) in progress at "
            f"{r['recovery_point']} since {r['since']:%Y-%m-%d %H:%M:%S}",
            {
                "record": r["pk"],
                "resource_type": r["resource_type"],
                "resource_id": r["resource_id"],
            },
        )
        for r in stuck.order_by("pk").values(
            "pk",
            "key",
            "method",
            "path",
            "recovery_point",
            "since",
            "resource_type",
            "resource_id",
        )
    ]
    return unfinished.count(), findings
