"""Reads for the pages: the catalogue, a customer's orders and an order's timeline."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet

from callbacks.models import ProviderNotification
from idempotency.models import IdempotencyKey
from orders.models import InventoryMovement, Order, Product, Shipment
from orders.selectors import order_get, order_list, product_list
from payments.models import LIVE_STATUSES, Payment, PaymentStatus, Refund
from sandbox.models import Fault
from sandbox.selectors import fault_list_active
from storefront.templatetags.storefront import money

# Two timestamps closer than this were written by the same transaction (the pay
# request's final phase stamps the payment and its record together); further apart,
# someone else settled the payment and the request only learned it later.
SAME_TRANSACTION = timedelta(seconds=1)


def catalogue() -> QuerySet[Product]:
    return product_list()


def product_cheapest_in_stock() -> Product | None:
    """What the chaos panel orders: the cheapest product there is stock of."""
    return product_list().filter(stock__gt=0).order_by("price", "sku").first()


def my_orders(*, user_id: int) -> QuerySet[Order]:
    return order_list(user_id=user_id).select_related("shipment")


def my_order(*, user_id: int, number: str) -> Order:
    """The caller's own order, or 404 (someone else's looks exactly like a missing one)."""
    return order_get(user_id=user_id, number=number)


def order_has_live_payment(*, order: Order) -> bool:
    return Payment.objects.filter(order=order, status__in=LIVE_STATUSES).exists()


def active_faults() -> QuerySet[Fault]:
    return fault_list_active()


# --- The timeline -------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    at: datetime | None
    kind: str  # created | payment | recovery | unknown | settled | notification | ...
    title: str
    detail: str = ""


def _short(key: str | None) -> str:
    if not key:
        return "(none)"
    return key if len(key) <= 14 else f"{key[:10]}…"


def _key_taken(record: IdempotencyKey, what: str) -> Event:
    return Event(
        record.created_at,
        "recovery",
        f"{what}: Idempotency-Key {_short(record.key)} taken (recovery point 'started')",
        "the lock is held while the request runs; a same-key request meanwhile gets 409",
    )


def _key_outcome(record: IdempotencyKey, what: str, *, stopped_at: str) -> Event:
    if record.is_finished:
        return Event(
            record.finished_at,
            "recovery",
            f"{what}: recovery point 'finished', answer {record.response_status} stored",
            "every retry with this key gets this answer back, replayed",
        )
    return Event(
        record.locked_at or record.created_at,
        "unknown",
        f"{what}: stopped at '{record.recovery_point}', no answer stored",
        f"{stopped_at}; a retry with the same key, or the completer, resumes from here",
    )


def _notifications(payments: list[Payment]) -> list[Any]:
    if not payments:
        return []
    references = [payment.out_trade_no for payment in payments]
    # By out_trade_no, not only by FK: an "unmatched" notification has no payment.
    return list(ProviderNotification.objects.filter(out_trade_no__in=references))


def _settled_by(payment: Payment, record: IdempotencyKey | None, applied: bool) -> str:
    if applied:
        return "by the provider's notification"
    if (
        record is not None
        and record.finished_at is not None
        and payment.settled_at is not None
        and abs(record.finished_at - payment.settled_at) < SAME_TRANSACTION
    ):
        return "by the pay request"
    return "by reconciliation (asked the provider)"


def _refund_events(order: Order) -> list[Event]:
    """The order's refunds, and the automatic refunds of its orphaned captures."""
    events: list[Event] = []
    for refund in Refund.objects.filter(payment__order=order):
        what = "Refund" if refund.order_id else "Automatic refund of an orphaned capture"
        events.append(
            Event(
                refund.created_at,
                "refund",
                f"{what}: recovery point 'refund_created', {refund.refund_no} committed as PENDING",
                f"{money(refund.amount, refund.currency)}; the provider is then asked with a key "
                "derived from this refund attempt",
            )
        )
        if refund.settled_at is not None:
            events.append(
                Event(
                    refund.settled_at,
                    "settled",
                    f"Refund {refund.status}",
                    f"provider refund_id {refund.refund_id}"
                    if refund.refund_id
                    else f"reason: {refund.failure_code or 'declined'}",
                )
            )
    return events


def pay_key_resumes(*, user_id: int, key: str) -> str:
    """What a pay request under ``key`` will do first, said before it runs ("" if it starts).

    A key whose record waits at 'payment_created' resumes there: if the attempt's
    outcome is unknown it asks the provider (query by out_trade_no) before any
    charge; if someone settled it meanwhile, it only reads that.
    """
    record = IdempotencyKey.objects.filter(user_id=user_id, key=key).first()
    if record is None or record.recovery_point != "payment_created" or not record.resource_id:
        return ""
    payment = Payment.objects.filter(pk=record.resource_id).first()
    if payment is None:
        return ""
    if payment.status == PaymentStatus.UNKNOWN:
        return (
            "resumed at 'payment_created' and asked the provider about the attempt "
            f"(query {payment.out_trade_no}) before charging"
        )
    if payment.status in (PaymentStatus.SUCCEEDED, PaymentStatus.FAILED):
        return (
            "resumed at 'payment_created' and found the payment already settled "
            f"({payment.status}): nothing was asked or charged again"
        )
    return ""


def order_timeline(*, order: Order, extra: Sequence[Event] = ()) -> list[Event]:
    """Everything that happened to the order, oldest first, with ``extra`` events merged."""
    events = [Event(order.created_at, "created", f"Order {order.number} created", "")]
    events += extra
    if order.idempotency_key:
        record = IdempotencyKey.objects.filter(
            user_id=order.user_id, key=order.idempotency_key
        ).first()
        if record is not None:
            events += [
                _key_taken(record, "Checkout"),
                _key_outcome(record, "Checkout", stopped_at="the order was not committed"),
            ]

    payments = list(Payment.objects.filter(order=order))
    records = {
        record.resource_id: record
        for record in IdempotencyKey.objects.filter(
            user_id=order.user_id,
            resource_type="payment",
            resource_id__in=[payment.pk for payment in payments],
        )
    }
    notifications = _notifications(payments)
    for payment in payments:
        record = records.get(payment.pk)
        if record is not None:
            events.append(_key_taken(record, "Pay"))
        events.append(
            Event(
                payment.created_at,
                "payment",
                f"Pay: recovery point 'payment_created', attempt {payment.out_trade_no} "
                "committed as PENDING",
                f"{money(payment.amount, payment.currency)}; the provider is then asked with a "
                "key derived from this attempt, outside any transaction",
            )
        )
        if record is not None:
            events.append(
                _key_outcome(record, "Pay", stopped_at="the provider's answer was not known")
            )
        mine = [n for n in notifications if n.out_trade_no == payment.out_trade_no]
        applied = any(n.outcome == "applied" for n in mine)
        if payment.status == PaymentStatus.UNKNOWN:
            events.append(
                Event(
                    payment.updated_at,
                    "unknown",
                    "Outcome unknown: the provider did not answer",
                    "waiting for a same-key retry or the reconciler; never guessed",
                )
            )
        elif payment.settled_at is not None:
            outcome = payment.trade_no if payment.status == PaymentStatus.SUCCEEDED else None
            events.append(
                Event(
                    payment.settled_at,
                    "settled",
                    f"Payment {payment.status} {_settled_by(payment, record, applied)}",
                    f"provider trade_no {outcome}"
                    if outcome
                    else f"reason: {payment.failure_code or 'declined'}",
                )
            )
        if payment.reconcile_attempts:
            events.append(
                Event(
                    payment.next_reconcile_at,
                    "reconcile",
                    f"Reconciler could not reach the provider {payment.reconcile_attempts}x",
                    "next try at this time, with exponential backoff",
                )
            )
        for notification in mine:
            events.append(
                Event(
                    notification.received_at,
                    "notification",
                    f"Notification {_short(notification.notify_id)} received: "
                    f"{notification.outcome}",
                    f"{notification.trade_status}; the shop answered "
                    f"{notification.response_status} (the same for every copy)",
                )
            )

    events += _refund_events(order)
    release = (
        InventoryMovement.objects.filter(order=order, kind=InventoryMovement.Kind.RELEASE)
        .order_by("created_at")
        .first()
    )
    if release is not None:
        events.append(Event(release.created_at, "cancelled", "Cancelled: stock released", ""))
    shipment = Shipment.objects.filter(order=order).first()
    if shipment is not None:
        events.append(
            Event(shipment.created_at, "shipped", "Shipped", "one shipment per order, by index")
        )
    # Stable: events of one transaction keep the order they were added in.
    return sorted(events, key=lambda event: event.at or order.created_at)
