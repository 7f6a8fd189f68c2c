"""refund_reversal: a refund that succeeds now and fails later.

A real refund can fail on its way to the payer after the provider said it
succeeded: the card was closed, the account frozen. The money then comes back
to the merchant's balance, the provider says so (Stripe: ``refund.updated``
with ``failed``, a ``refund_failure`` on the statement), and the payer still
waits for it. The sandbox plays that: the refund is committed SUCCESS (its
answer, which the idempotency record replays, says so for ever), and after the
fault's delay_s a Celery task reverses it — the charge's refundable rest given
back, the payer's credit taken back, SUCCESS -> REVERSED — and notifies it.
From then on GET (the truth) shows REVERSED, and the statement lists a
``refund_failure`` line on the day it failed.

A payer who spent the refunded money meanwhile cannot have it taken back: then
the refund stays SUCCESS (its ``reverses_at`` cleared), as the truth.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from demo.sandbox.models import Charge, Notification, Refund
from demo.sandbox.services.declines import DECLINE_REFUND_FAILED
from demo.sandbox.services.faults import NO_FAULTS, AppliedFaults
from demo.sandbox.services.later import task_at_commit
from demo.sandbox.services.notifications import refund_notifications_schedule
from demo.sandbox.services.wallets import wallet_uncredit


def refund_reversal_schedule(*, refund: Refund) -> None:
    """Enqueue the reversal of ``refund`` once its transaction commits."""
    assert refund.reverses_at is not None
    task_at_commit("reverse_refund", refund.pk, refund.reverses_at)


def refund_reversal_settle(*, refund_id: int) -> Refund | None:
    """Make a scheduled reversal happen. Safe to run twice: None when already done.

    One transaction: claim (a conditional UPDATE that clears the marker; a second
    run finds no row), give the amount back to the charge's refundable rest,
    take the payer's credit back, SUCCESS -> REVERSED and its notification. The
    charge row is locked before the wallet, as every refund does.
    """
    with transaction.atomic():
        claimed = Refund.objects.filter(
            pk=refund_id, status=Refund.Status.SUCCESS, reverses_at__isnull=False
        ).update(reverses_at=None)
        if not claimed:
            return None
        refund = Refund.objects.select_related("charge").get(pk=refund_id)
        try:
            with transaction.atomic():  # both moves, or neither
                _take_back(refund)
        except _Spent:
            # The payer spent it already: the refund reached them after all, and the
            # cleared marker (outside the savepoint) says it will not fail any more.
            return refund
        Refund.objects.filter(pk=refund_id, status=Refund.Status.SUCCESS).update(
            status=Refund.Status.REVERSED,
            reversed_at=timezone.now(),
            decline_reason=DECLINE_REFUND_FAILED,
        )
        refund.refresh_from_db()
        refund_notifications_schedule(refund=refund, faults=_reversal_faults(refund))
        return refund


class _Spent(Exception):
    """The payer's balance no longer holds the refunded money."""


def _take_back(refund: Refund) -> None:
    charge = refund.charge
    returned = Charge.objects.filter(pk=charge.pk, refunded_total__gte=refund.amount).update(
        refunded_total=F("refunded_total") - refund.amount
    )
    assert charge.wallet_id is not None  # a refunded charge has its terms
    if not returned or not wallet_uncredit(wallet_id=charge.wallet_id, amount=refund.amount):
        raise _Spent()


# A refund whose notifications ``callback_drop`` dropped stays silent when it fails
# later too: the merchant learns of it by asking, or from the statement.
_SILENT = AppliedFaults(drop_notification=True)


def _reversal_faults(refund: Refund) -> AppliedFaults:
    notified = Notification.objects.filter(refund=refund).exists()
    return NO_FAULTS if notified else _SILENT
