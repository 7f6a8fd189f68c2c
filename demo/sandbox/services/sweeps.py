"""The sandbox's safety net for messages its broker lost (docs/design.md, "Redis down").

A settled charge or refund enqueues its notifications, a charge or refund
declined under ``late_success`` enqueues its late success, a refund under
``refund_reversal`` its reversal, a charge under ``dispute_lost`` its dispute
(and the dispute its close), once the transaction commits (``on_commit``,
robust). A broker that is down at that instant loses the message while the
rows stay as committed: a notification PENDING and never tried, a
``late_success_at`` (``reverses_at``, ``disputes_at``, ``closes_at``) that
passes with nothing to act on it. This sweep,
run by beat, finds those a grace period late and sees them done, so an outage
of the broker delays the provider's side of the story but does not rewrite it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from demo.sandbox.models import Charge, Dispute, Notification, Refund
from demo.sandbox.services.disputes import dispute_close_lost, dispute_open
from demo.sandbox.services.late_success import late_success_settle, refund_late_success_settle
from demo.sandbox.services.notifications import notification_enqueue
from demo.sandbox.services.reversals import refund_reversal_settle

logger = logging.getLogger(__name__)

# Far longer than a live broker takes to hand a message to a worker (milliseconds),
# so a notification or late success still on its way is never sent twice for
# nothing; a duplicate would be harmless anyway (the merchant dedupes on notify_id,
# and settling a late success claims its row first).
SWEEP_AFTER_S = 120
# Bounded per run: beat runs the sweep again a minute later.
BATCH = 500


@dataclass(frozen=True)
class SweepCounts:
    notifications_enqueued: int
    late_charges_settled: int
    late_refunds_settled: int
    refunds_reversed: int = 0
    disputes_opened: int = 0
    disputes_closed: int = 0
    failed: int = 0  # items that raised: logged with their reference, tried next sweep


def _each(kind: str, ids: Iterable[int], work: Callable[[int], object]) -> tuple[int, int]:
    """``work(id)`` for every id, each on its own: (how many did something, how many
    raised). One item that raises (a row the database refuses, data that breaks its
    handler) is logged with its id and left for the next sweep; the rest go on. The
    sandbox is another company: it keeps no desk of the shop's, only its log."""
    done = failed = 0
    for pk in ids:
        try:
            done += work(pk) is not None
        except Exception:
            failed += 1
            logger.exception("sandbox sweep: %s %s failed; left for the next sweep", kind, pk)
    return done, failed


def _enqueue(notification_id: int) -> bool:
    notification_enqueue(notification_id=notification_id, countdown=0)
    return True


def _scheduled(
    *, due_before: datetime | None
) -> list[tuple[str, QuerySet[Any], Callable[[int], object]]]:
    """The money moves the sandbox has scheduled and not made yet (each row's time is
    cleared when its move is made), due before ``due_before`` (None: whenever due),
    each with what makes it: a late success of a charge or of a refund, a refund's
    reversal, a dispute to open, a dispute to close as lost."""

    def due(field: str) -> Q:
        if due_before is None:
            return Q(**{f"{field}__isnull": False})
        return Q(**{f"{field}__lt": due_before})

    return [
        (
            "charge",
            Charge.objects.filter(due("late_success_at"), status=Charge.Status.DECLINED),
            lambda pk: late_success_settle(charge_id=pk),
        ),
        (
            "refund",
            Refund.objects.filter(due("late_success_at"), status=Refund.Status.DECLINED),
            lambda pk: refund_late_success_settle(refund_id=pk),
        ),
        (
            "reversal",
            Refund.objects.filter(due("reverses_at"), status=Refund.Status.SUCCESS),
            lambda pk: refund_reversal_settle(refund_id=pk),
        ),
        (
            "dispute",
            Charge.objects.filter(due("disputes_at"), status=Charge.Status.SUCCESS),
            lambda pk: dispute_open(charge_id=pk),
        ),
        (
            "dispute",
            Dispute.objects.filter(due("closes_at"), status=Dispute.Status.OPEN),
            lambda pk: dispute_close_lost(dispute_id=pk),
        ),
    ]


def sandbox_scheduled_left() -> int:
    """How many money moves the sandbox has scheduled and not made yet, due or not: a
    run that waits for everything to settle waits for these too (tools/chaos)."""
    return sum(rows.count() for _, rows, _ in _scheduled(due_before=None))


def sandbox_sweep_run_once(*, after_s: float = SWEEP_AFTER_S) -> SweepCounts:
    """Enqueue again what was never tried, settle the late successes past due."""
    cutoff = timezone.now() - timedelta(seconds=after_s)
    # Never tried, and due (its first delay, for a shuffled copy) before the cutoff.
    never_tried = Notification.objects.filter(
        status=Notification.Status.PENDING, attempts=0, created_at__lt=cutoff
    ).order_by("pk")
    lost = [
        row.pk
        for row in never_tried[:BATCH]
        if row.created_at + timedelta(seconds=row.first_delay_s) < cutoff
    ]
    enqueued, failed_notifications = _each("notification", lost, _enqueue)
    (
        (charges_settled, failed_charges),
        (refunds_settled, failed_refunds),
        (reversed_, failed_reversals),
        (opened, failed_openings),
        (closed, failed_closings),
    ) = [
        _each(kind, rows.values_list("pk", flat=True)[:BATCH], work)
        for kind, rows, work in _scheduled(due_before=cutoff)
    ]
    return SweepCounts(
        notifications_enqueued=enqueued,
        late_charges_settled=charges_settled,
        late_refunds_settled=refunds_settled,
        refunds_reversed=reversed_,
        disputes_opened=opened,
        disputes_closed=closed,
        failed=(
            failed_notifications
            + failed_charges
            + failed_refunds
            + failed_reversals
            + failed_openings
            + failed_closings
        ),
    )
