"""Disputes after they are booked: asked about while open, and a case while open
(docs/design.md, "Money that moves after the fact").

A dispute is booked from whatever tells of it first (a notification, a
statement line: payments/disputes.py). While it is open:

- ``disputes_refresh``: the provider is asked about it again once its row has
  not changed for RECONCILE_BACKOFF_CAP_S (the longest the reconciler waits
  between two questions), so a lost notification of its close, or of its money
  reinstated, is not lost for the books;
- ``dispute_cases_run_once``: it is a ``dispute`` case (a person may answer it at
  the provider, with evidence), opened once and closed by the machine when the
  dispute closes, won or lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone

from payments.disputes import dispute_apply
from payments.models import Dispute, DisputeStatus
from payments.providers import PaymentProvider, ProviderOutcomeUnknown
from reconcile.desk.isolation import DISPUTES, FailureIsolation
from reconcile.desk.models import Case, CaseKind, CaseState
from reconcile.desk.services import case_close_by_machine, case_open


def disputes_refresh(*, provider: PaymentProvider) -> tuple[int, int]:
    """Ask again about every open dispute quiet for RECONCILE_BACKOFF_CAP_S: (asked, failed)."""
    quiet_since = timezone.now() - timedelta(seconds=settings.RECONCILE_BACKOFF_CAP_S)
    isolation = FailureIsolation(job=DISPUTES, subject_type="dispute")
    asked = 0
    for dispute in Dispute.objects.filter(status=DisputeStatus.OPEN, updated_at__lt=quiet_since):
        if not isolation.due(dispute.pk):
            continue
        asked += isolation.run(
            key=dispute.pk,
            reference=dispute.dispute_id,
            work=partial(_refresh, dispute=dispute, provider=provider),
            failed=False,
        )
    return asked, isolation.failed


def _refresh(*, dispute: Dispute, provider: PaymentProvider) -> bool:
    try:
        account = provider.query_dispute(dispute_id=dispute.dispute_id)
    except ProviderOutcomeUnknown:
        return False  # asked again at the next pass
    if account is not None:
        dispute_apply(account=account)
    # Quiet or not, it was asked about now: the next question waits its turn again.
    Dispute.objects.filter(pk=dispute.pk).update(updated_at=timezone.now())
    return True


@dataclass(frozen=True)
class DisputeCaseCounts:
    opened: int = 0
    closed: int = 0


def dispute_cases_run_once() -> DisputeCaseCounts:
    """A case for each open dispute that never had one; closed when the dispute is."""
    ever = Case.objects.filter(
        kind=CaseKind.DISPUTE, subject_type="dispute", subject_id=OuterRef("pk")
    )
    opened = 0
    for dispute in (
        Dispute.objects.filter(status=DisputeStatus.OPEN)
        .exclude(Exists(ever))
        .select_related("payment__order")
        .order_by("pk")
    ):
        opened += (
            case_open(
                kind=CaseKind.DISPUTE,
                subject_type="dispute",
                subject_id=dispute.pk,
                reference=dispute.dispute_id,
                summary=f"dispute {dispute.dispute_id} ({dispute.reason or 'no reason given'}) "
                f"of {dispute.amount} {dispute.currency}, order "
                f"{dispute.payment.order.number}: the provider withdrew {dispute.withdrawn}. "
                "Answer it at the provider with the order's evidence; this case closes "
                "when the dispute does.",
            )
            is not None
        )
    closed = 0
    held = Case.objects.filter(
        kind=CaseKind.DISPUTE, subject_type="dispute", state=CaseState.OPEN
    ).values("subject_id")
    for dispute in Dispute.objects.filter(pk__in=held).exclude(status=DisputeStatus.OPEN):
        closed += case_close_by_machine(
            kind=CaseKind.DISPUTE,
            subject_type="dispute",
            subject_id=dispute.pk,
            resolution=f"dispute {dispute.dispute_id} closed: {dispute.status}",
        )
    return DisputeCaseCounts(opened=opened, closed=closed)
