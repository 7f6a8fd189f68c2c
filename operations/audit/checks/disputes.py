"""Disputes (invariant 2 of docs/design.md, its dispute half): the books and the provider agree.

For every dispute the shop booked, the provider's account of it (``query_dispute``,
read through its API as a third party's) has the same status and moved the
same money, withdrawn and reinstated, as our ledger entries of it. One
question per dispute: disputes are few (a shop with many would ask about the
open ones and those closed lately).
"""

from __future__ import annotations

from django.db.models import OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

from operations.audit.checks import AuditContext, Checked
from operations.audit.findings import Finding
from payments.models import Dispute, LedgerEntry
from payments.providers import ProviderOutcomeUnknown

DISPUTE_AGREES = "dispute-agrees-with-the-provider"


def _booked(kind: str) -> Coalesce:
    entries = LedgerEntry.objects.filter(dispute=OuterRef("pk"), kind=kind)
    return Coalesce(Subquery(entries.values("dispute").annotate(t=Sum("amount")).values("t")), 0)


def disputes(ctx: AuditContext) -> Checked:
    """Each dispute's status, withdrawn and reinstated money: ours = the provider's."""
    rows = Dispute.objects.select_related("payment").annotate(
        booked_withdrawn=_booked(LedgerEntry.Kind.DISPUTE_WITHDRAWAL),
        booked_reinstated=_booked(LedgerEntry.Kind.DISPUTE_REINSTATEMENT),
    )
    findings: list[Finding] = []
    for dispute in rows.order_by("pk"):
        ids: dict[str, object] = {
            "dispute": dispute.pk,
            "payment": dispute.payment_id,
            "order": dispute.payment.order_id,
        }
        ours = (dispute.status, dispute.booked_withdrawn, dispute.booked_reinstated)
        try:
            account = ctx.provider.query_dispute(dispute_id=dispute.dispute_id)
        except ProviderOutcomeUnknown as error:
            findings.append(
                Finding(DISPUTE_AGREES, f"dispute {dispute.dispute_id}: unreadable: {error}", ids)
            )
            continue
        theirs = (account.status.value, account.withdrawn, account.reinstated) if account else None
        if theirs != ours:
            findings.append(
                Finding(
                    DISPUTE_AGREES,
                    f"dispute {dispute.dispute_id} of {dispute.payment.out_trade_no}: ours "
                    f"(status, withdrawn, reinstated) {ours}, the provider's {theirs}",
                    ids,
                )
            )
    return rows.count(), findings
