"""The notifications a settled charge schedules: rows now, Celery at commit."""

from __future__ import annotations

import random
import secrets
from functools import partial

from django.db import transaction

from sandbox.models import Charge, Notification
from sandbox.serializers import charge_json
from sandbox.services.faults import AppliedFaults
from sandbox.tasks import deliver_notification


def _new_notify_id() -> str:
    return "N" + secrets.token_hex(12).upper()


def notification_enqueue(*, notification_id: int, countdown: float) -> None:
    """Hand one notification copy to Celery. Called only after the charge committed."""
    deliver_notification.apply_async(args=(notification_id,), countdown=countdown)


def notifications_schedule(*, charge: Charge, faults: AppliedFaults) -> list[Notification]:
    """Store one row per copy and enqueue each once the transaction commits.

    The rows commit with the charge, so a notification is never lost between the
    charge and the queue: a crash before commit loses both, after it the rows
    exist (and stay pending if the enqueue itself was lost).
    """
    if faults.drop_notification:
        return []
    payload = {
        "notify_id": _new_notify_id(),
        "trade_no": charge.trade_no,
        "out_trade_no": charge.out_trade_no,
        "trade_status": charge.status,
        "amount": charge.amount,
        "currency": charge.currency,
        "paid_at": charge_json(charge)["paid_at"],
    }
    spread = faults.shuffle_spread_s
    rows = Notification.objects.bulk_create(
        Notification(
            notify_id=payload["notify_id"],
            copy=number,
            charge=charge,
            payload=payload,
            first_delay_s=0.0 if spread is None else random.uniform(0, spread),  # noqa: S311
        )
        for number in range(1, faults.copies + 1)
    )
    queue_order = list(rows)
    if spread is not None:
        random.shuffle(queue_order)
    for row in queue_order:
        # Bound now (partial), run at commit; discarded if the transaction rolls back.
        transaction.on_commit(
            partial(notification_enqueue, notification_id=row.pk, countdown=row.first_delay_s)
        )
    return rows
