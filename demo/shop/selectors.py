"""Reads for the pages: the catalogue, a customer's orders and an order's timeline."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext

from callbacks.models import ProviderNotification
from demo.sandbox.models import Fault
from demo.sandbox.selectors import fault_list_active
from demo.shop.labels import notification_outcome
from demo.shop.templatetags.storefront import money
from idempotency.models import IdempotencyKey
from orders.models import InventoryMovement, Order, Product, Shipment
from orders.selectors import order_get, order_list, product_list
from payments.models import LIVE_STATUSES, Payment, PaymentStatus, Refund

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
        return gettext("(none)")
    return key if len(key) <= 14 else f"{key[:10]}…"


def _key_taken(record: IdempotencyKey, what: str) -> Event:
    return Event(
        record.created_at,
        "recovery",
        gettext("%(what)s: Idempotency-Key %(key)s taken (recovery point 'started')")
        % {"what": what, "key": _short(record.key)},
        gettext("the lock is held while the request runs; a same-key request meanwhile gets 409"),
    )


def _key_outcome(record: IdempotencyKey, what: str, *, stopped_at: str) -> Event:
    if record.is_finished:
        return Event(
            record.finished_at,
            "recovery",
            gettext("%(what)s: recovery point 'finished', answer %(status)s stored")
            % {"what": what, "status": record.response_status},
            gettext("every retry with this key gets this answer back, replayed"),
        )
    return Event(
        record.locked_at or record.created_at,
        "unknown",
        gettext("%(what)s: stopped at '%(point)s', no answer stored")
        % {"what": what, "point": record.recovery_point},
        gettext("%(stopped_at)s; a retry with the same key, or the completer, resumes from here")
        % {"stopped_at": stopped_at},
    )


def _notifications(payments: list[Payment]) -> list[Any]:
    if not payments:
        return []
    references = [payment.out_trade_no for payment in payments]
    # By out_trade_no, not only by FK: an "unmatched" notification has no payment.
    return list(ProviderNotification.objects.filter(out_trade_no__in=references))


def _settled_by(payment: Payment, record: IdempotencyKey | None, applied: bool) -> str:
    if applied:
        return gettext("by the provider's notification")
    if (
        record is not None
        and record.finished_at is not None
        and payment.settled_at is not None
        and abs(record.finished_at - payment.settled_at) < SAME_TRANSACTION
    ):
        return gettext("by the pay request")
    return gettext("by reconciliation (asked the provider)")


def _refund_events(order: Order) -> list[Event]:
    """The order's refunds, and the automatic refunds of its orphaned captures."""
    events: list[Event] = []
    for refund in Refund.objects.filter(payment__order=order):
        what = (
            gettext("Refund")
            if refund.order_id
            else gettext("Automatic refund of an orphaned capture")
        )
        events.append(
            Event(
                refund.created_at,
                "refund",
                gettext(
                    "%(what)s: recovery point 'refund_created', %(refund)s committed as PENDING"
                )
                % {"what": what, "refund": refund.refund_no},
                gettext(
                    "%(amount)s; the provider is then asked with a key derived from this refund "
                    "attempt"
                )
                % {"amount": money(refund.amount, refund.currency)},
            )
        )
        if refund.settled_at is not None:
            events.append(
                Event(
                    refund.settled_at,
                    "settled",
                    gettext("Refund %(status)s") % {"status": refund.status},
                    gettext("provider refund_id %(id)s") % {"id": refund.refund_id}
                    if refund.refund_id
                    else gettext("reason: %(code)s") % {"code": refund.failure_code or "declined"},
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
        return gettext(
            "It resumed at 'payment_created' and asked the provider about the attempt "
            "(query %(reference)s) before charging."
        ) % {"reference": payment.out_trade_no}
    if payment.status in (PaymentStatus.SUCCEEDED, PaymentStatus.FAILED):
        return gettext(
            "It resumed at 'payment_created' and found the payment already settled "
            "(%(status)s): nothing was asked or charged again."
        ) % {"status": payment.status}
    return ""


def order_timeline(*, order: Order, extra: Sequence[Event] = ()) -> list[Event]:
    """Everything that happened to the order, oldest first, with ``extra`` events merged."""
    events = [
        Event(
            order.created_at,
            "created",
            gettext("Order %(number)s created") % {"number": order.number},
            "",
        )
    ]
    events += extra
    if order.idempotency_key:
        record = IdempotencyKey.objects.filter(
            user_id=order.user_id, key=order.idempotency_key
        ).first()
        if record is not None:
            events += [
                _key_taken(record, gettext("Checkout")),
                _key_outcome(
                    record,
                    gettext("Checkout"),
                    stopped_at=gettext("the order was not committed"),
                ),
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
            events.append(_key_taken(record, gettext("Pay")))
        events.append(
            Event(
                payment.created_at,
                "payment",
                gettext(
                    "Pay: recovery point 'payment_created', attempt %(reference)s committed as "
                    "PENDING"
                )
                % {"reference": payment.out_trade_no},
                gettext(
                    "%(amount)s; the provider is then asked with a key derived from this "
                    "attempt, outside any transaction"
                )
                % {"amount": money(payment.amount, payment.currency)},
            )
        )
        if record is not None:
            events.append(
                _key_outcome(
                    record,
                    gettext("Pay"),
                    stopped_at=gettext("the provider's answer was not known"),
                )
            )
        mine = [n for n in notifications if n.out_trade_no == payment.out_trade_no]
        applied = any(n.outcome == "applied" for n in mine)
        if payment.status == PaymentStatus.UNKNOWN:
            events.append(
                Event(
                    payment.updated_at,
                    "unknown",
                    gettext("Outcome unknown: the provider did not answer"),
                    gettext("waiting for a same-key retry or the reconciler; never guessed"),
                )
            )
        elif payment.settled_at is not None:
            outcome = payment.trade_no if payment.status == PaymentStatus.SUCCEEDED else None
            events.append(
                Event(
                    payment.settled_at,
                    "settled",
                    gettext("Payment %(status)s %(by)s")
                    % {"status": payment.status, "by": _settled_by(payment, record, applied)},
                    gettext("provider trade_no %(id)s") % {"id": outcome}
                    if outcome
                    else gettext("reason: %(code)s") % {"code": payment.failure_code or "declined"},
                )
            )
        if payment.reconcile_attempts:
            events.append(
                Event(
                    payment.next_reconcile_at,
                    "reconcile",
                    gettext("Reconciler could not reach the provider %(times)sx")
                    % {"times": payment.reconcile_attempts},
                    gettext("next try at this time, with exponential backoff"),
                )
            )
        for notification in mine:
            events.append(
                Event(
                    notification.received_at,
                    "notification",
                    gettext("Notification %(id)s received: %(outcome)s")
                    % {
                        "id": _short(notification.notify_id),
                        "outcome": notification_outcome(notification.outcome),
                    },
                    gettext("%(status)s; the shop answered %(answer)s (the same for every copy)")
                    % {
                        "status": notification.trade_status,
                        "answer": notification.response_status,
                    },
                )
            )

    events += _refund_events(order)
    release = (
        InventoryMovement.objects.filter(order=order, kind=InventoryMovement.Kind.RELEASE)
        .order_by("created_at")
        .first()
    )
    if release is not None:
        events.append(
            Event(release.created_at, "cancelled", gettext("Cancelled: stock released"), "")
        )
    shipment = Shipment.objects.filter(order=order).first()
    if shipment is not None:
        events.append(
            Event(
                shipment.created_at,
                "shipped",
                gettext("Shipped"),
                gettext("one shipment per order, by index"),
            )
        )
    # Stable: events of one transaction keep the order they were added in.
    return sorted(events, key=lambda event: event.at or order.created_at)
