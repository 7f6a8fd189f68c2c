"""Refunds reversed at the provider: a case for a person, once (docs/design.md,
"Money that moves after the fact").

A refund that succeeded and then failed (payments/reversals.py) put the money
back in the shop's balance, and the customer still waits for it. The machine
books it (the reversal entry, the order back to PAID) but cannot decide what
comes next: refund to another card, pay by other means, talk to the customer.
So each reversed refund of an order becomes one ``refund-reversed`` case, opened
once (a person who closed it is not asked again), and closed by the machine
when a later refund of the same order went through. An orphaned capture's
refund needs no person: the reconciler starts its next attempt by itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Exists, OuterRef

from payments.models import Refund, RefundAttemptStatus
from reconcile.desk.models import Case, CaseKind, CaseState
from reconcile.desk.services import case_close_by_machine, case_open


@dataclass(frozen=True)
class ReversalCaseCounts:
    opened: int = 0
    closed: int = 0


def reversal_cases_run_once() -> ReversalCaseCounts:
    """Open a case for each reversed refund of an order that never had one; close those
    whose order was refunded again since."""
    ever = Case.objects.filter(
        kind=CaseKind.REFUND_REVERSED, subject_type="refund", subject_id=OuterRef("pk")
    )
    opened = 0
    for refund in (
        Refund.objects.filter(status=RefundAttemptStatus.REVERSED, order__isnull=False)
        .exclude(Exists(ever))
        .select_related("order", "payment")
        .order_by("pk")
    ):
        assert refund.order is not None
        opened += (
            case_open(
                kind=CaseKind.REFUND_REVERSED,
                subject_type="refund",
                subject_id=refund.pk,
                reference=refund.refund_no,
                summary=f"refund {refund.refund_no} of {refund.amount} {refund.currency} "
                f"(order {refund.order.number}, payer {refund.payment.payer}) went through, "
                f"then failed at the provider ({refund.failure_code}): the money is back "
                "with the shop and the customer still awaits it. Refund the order again "
                "once the customer gives another way, or settle it with them.",
            )
            is not None
        )
    refunded_again = Refund.objects.filter(
        order=OuterRef("order"),
        status=RefundAttemptStatus.SUCCEEDED,
        created_at__gt=OuterRef("created_at"),
    )
    closed = 0
    held = Case.objects.filter(
        kind=CaseKind.REFUND_REVERSED, subject_type="refund", state=CaseState.OPEN
    ).values("subject_id")
    for refund in Refund.objects.filter(pk__in=held).filter(Exists(refunded_again)):
        closed += case_close_by_machine(
            kind=CaseKind.REFUND_REVERSED,
            subject_type="refund",
            subject_id=refund.pk,
            resolution=f"order refunded again after {refund.refund_no} was reversed",
        )
    return ReversalCaseCounts(opened=opened, closed=closed)
