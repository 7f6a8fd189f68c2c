"""dispute_lost: a charge disputed by the payer's bank, and the dispute lost.

A chargeback moves money without the merchant asking: the payer's bank
disputes a charge, the provider takes the money back from the merchant at
once (funds withdrawn) and gives it to the payer, and weeks later the dispute
closes: won (the money is reinstated to the merchant) or lost (it stays with
the payer). The sandbox plays the lost one: a charge under the fault succeeds
as usual; after the fault's delay_s a Celery task opens the dispute (OPEN,
the payer's wallet credited, notified), and after as long again another
closes it LOST (notified). GET /sandbox/v1/disputes/{id} is the truth, and the
statement lists a ``dispute_withdrawal`` line on the day it opened.

Only what is left of the charge is disputed (its amount less what was refunded
by then); a charge refunded in full is not disputed at all. A disputed charge
cannot be refunded any more (``charge_disputed``), as at a real provider.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from demo.sandbox.models import Charge, Dispute
from demo.sandbox.services.declines import DISPUTE_REASON
from demo.sandbox.services.later import task_at_commit
from demo.sandbox.services.notifications import dispute_notifications_schedule
from demo.sandbox.services.wallets import wallet_dispute_credit


def _new_dispute_id() -> str:
    return "D" + secrets.token_hex(10).upper()


def dispute_schedule(*, charge: Charge) -> None:
    """Enqueue the opening of the dispute scheduled on ``charge`` (``disputes_at``)."""
    assert charge.disputes_at is not None
    task_at_commit("open_dispute", charge.pk, charge.disputes_at)


def dispute_open(*, charge_id: int) -> Dispute | None:
    """Open the dispute scheduled on a charge. Safe to run twice: None when done already.

    One transaction: claim (clear ``disputes_at``; a second run finds no row),
    the dispute row (OPEN, what is left of the charge), the payer's wallet
    credited, the notification, and the close scheduled as long after as the
    dispute took to open (the fault's delay_s).
    """
    scheduled = Charge.objects.filter(pk=charge_id).values("created_at", "disputes_at").first()
    if scheduled is None or scheduled["disputes_at"] is None:
        return None
    close_after = scheduled["disputes_at"] - scheduled["created_at"]
    with transaction.atomic():
        now = timezone.now()
        # The claim locks the charge row before the wallet, as a refund does, and marks
        # it disputed in the same UPDATE: a refund's conditional UPDATE of that row
        # waits for it, then finds it disputed.
        claimed = Charge.objects.filter(
            pk=charge_id, status=Charge.Status.SUCCESS, disputes_at__isnull=False
        ).update(disputes_at=None, disputed_at=now)
        if not claimed:
            return None
        charge = Charge.objects.get(pk=charge_id)
        assert charge.amount is not None
        assert charge.currency is not None
        assert charge.wallet_id is not None
        left = charge.amount - charge.refunded_total
        if left <= 0:
            # Refunded in full meanwhile: nothing is left to dispute, nor marked.
            Charge.objects.filter(pk=charge_id).update(disputed_at=None)
            return None
        dispute = Dispute.objects.create(
            dispute_id=_new_dispute_id(),
            charge=charge,
            status=Dispute.Status.OPEN,
            amount=left,
            currency=charge.currency,
            reason=DISPUTE_REASON,
            opened_at=now,
            closes_at=now + max(close_after, timedelta(0)),
        )
        wallet_dispute_credit(wallet_id=charge.wallet_id, amount=left)
        dispute_notifications_schedule(dispute=dispute)
        assert dispute.closes_at is not None
        task_at_commit("close_dispute", dispute.pk, dispute.closes_at)
        return dispute


def dispute_close_lost(*, dispute_id: int) -> Dispute | None:
    """Close an open dispute LOST (the money stays with the payer). None when done."""
    with transaction.atomic():
        now = timezone.now()
        closed = Dispute.objects.filter(
            pk=dispute_id, status=Dispute.Status.OPEN, closes_at__isnull=False
        ).update(status=Dispute.Status.LOST, closes_at=None, closed_at=now)
        if not closed:
            return None
        dispute = Dispute.objects.select_related("charge").get(pk=dispute_id)
        dispute_notifications_schedule(dispute=dispute)
        return dispute
