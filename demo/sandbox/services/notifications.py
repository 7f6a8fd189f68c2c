"""The notifications a settled charge or refund schedules: rows now, Celery at commit."""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable
from typing import Any

from django.db import transaction

from config.celery import whole_seconds
from demo.sandbox.models import Charge, Dispute, Notification, Refund
from demo.sandbox.serializers import charge_json, dispute_json, refund_json
from demo.sandbox.services.faults import NO_FAULTS, AppliedFaults

# The ``event`` of a refund (dispute) notification. A charge notification has no
# ``event``: its body stays exactly what merchants already read.
REFUND_EVENT = "refund"
DISPUTE_EVENT = "dispute"


def _new_notify_id() -> str:
    return "N" + secrets.token_hex(12).upper()


def notification_enqueue(*, notification_id: int, countdown: float) -> None:
    """Hand one notification copy to Celery. Called only after the charge committed."""
    # Imported here, not at the top: the shop's pages import these services (the demo's
    # chaos panel), and a module-level import would register the task in every process,
    # a deployed shop's worker included (config/celery.py registers it only where
    # SANDBOX_ENABLED).
    from demo.sandbox.tasks import deliver_notification

    deliver_notification.apply_async(args=(notification_id,), countdown=whole_seconds(countdown))


def charge_notifications_schedule(
    *, charge: Charge, faults: AppliedFaults = NO_FAULTS
) -> list[Notification]:
    """What a settled charge sends (its body has no ``event``)."""
    payload = {
        "notify_id": _new_notify_id(),
        "trade_no": charge.trade_no,
        "out_trade_no": charge.out_trade_no,
        "trade_status": charge.status,
        "amount": charge.amount,
        "currency": charge.currency,
        "paid_at": charge_json(charge)["paid_at"],
    }
    return _schedule(payload=payload, subject={"charge": charge}, faults=faults)


def refund_notifications_schedule(*, refund: Refund, faults: AppliedFaults) -> list[Notification]:
    """What a settled refund sends: ``event: refund`` and the refund's fields."""
    body = refund_json(refund)
    payload = {
        "event": REFUND_EVENT,
        "notify_id": _new_notify_id(),
        **{
            name: body[name]
            for name in (
                "refund_id",
                "out_refund_no",
                "out_trade_no",
                "status",
                "amount",
                "currency",
                "refunded_at",
            )
        },
        # A refund that failed after it went through says when, too.
        **({"reversed_at": body["reversed_at"]} if refund.status == Refund.Status.REVERSED else {}),
    }
    return _schedule(payload=payload, subject={"refund": refund}, faults=faults)


def dispute_notifications_schedule(*, dispute: Dispute) -> list[Notification]:
    """What a dispute that opened or closed sends: ``event: dispute`` and its fields.

    Silent for a charge whose own notifications ``callback_drop`` dropped: the
    merchant learns of it by asking, or from the statement.
    """
    body = dispute_json(dispute)
    payload = {"event": DISPUTE_EVENT, "notify_id": _new_notify_id(), **body}
    notified = Notification.objects.filter(charge=dispute.charge).exists()
    faults = NO_FAULTS if notified else AppliedFaults(drop_notification=True)
    return _schedule(payload=payload, subject={"dispute": dispute}, faults=faults)


def _schedule(
    *, payload: dict[str, Any], subject: dict[str, Any], faults: AppliedFaults
) -> list[Notification]:
    """Store one row per copy and enqueue each once the transaction commits.

    The rows commit with the charge (or refund), so a notification is never lost
    between the money and the queue: a crash before commit loses both, after it
    the rows exist (and stay pending if the enqueue itself was lost).
    """
    if faults.drop_notification:
        return []
    spread = faults.shuffle_spread_s
    rows = Notification.objects.bulk_create(
        Notification(
            notify_id=payload["notify_id"],
            copy=number,
            payload=payload,
            first_delay_s=0.0 if spread is None else random.uniform(0, spread),  # noqa: S311
            **subject,
        )
        for number in range(1, faults.copies + 1)
    )
    queue_order = list(rows)
    if spread is not None:
        random.shuffle(queue_order)
    for row in queue_order:
        # Run at commit, discarded if the transaction rolls back. Robust: the money
        # has moved and committed, so a broker failure must not turn its answer into
        # a 500; the row stays PENDING (the merchant's reconciler asks anyway).
        transaction.on_commit(_enqueue_at_commit(row), robust=True)
    return rows


def _enqueue_at_commit(row: Notification) -> Callable[[], None]:
    # A named function, not a partial: Django logs a robust hook's failure by the
    # callable's __qualname__, which a partial does not have.
    def enqueue_notification() -> None:
        notification_enqueue(notification_id=row.pk, countdown=row.first_delay_s)

    return enqueue_notification
