"""late_success: a charge declined now that succeeds later.

Asynchronous payment methods (a bank transfer, a wallet app waiting for the
payer) answer "not paid" at once and may still be paid minutes later. The
sandbox plays that: the charge is committed DECLINED (its answer, which the
idempotency record replays, says so for ever), and after the fault's delay_s a
Celery task flips the row to SUCCESS, debits the wallet then, and notifies.
From then on, GET (the truth) shows SUCCESS.

It succeeds even if the merchant closed the attempt meanwhile: closing a
DECLINED charge changes nothing (services.charges.charge_close), just as a
real provider's close cannot recall money a payer already sent. That is the
orphaned capture the shop must account for (refund it, or roll forward).

Refunds too (``target: refund``): a refund answered DECLINED now goes through
after the delay — the charge's refundable rest taken then, the wallet credited,
SUCCESS notified (unless ``callback_drop`` dropped the declined answer's
notifications: then the late success is not notified either) — unless the
charge has no such rest left by then (another refund came first): then it
stays DECLINED, for that reason, and nothing moves.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from config.celery import whole_seconds
from demo.sandbox.models import Charge, Notification, Refund
from demo.sandbox.services.declines import DECLINE_EXCEEDS_REFUNDABLE, DECLINE_INSUFFICIENT_FUNDS
from demo.sandbox.services.faults import NO_FAULTS, AppliedFaults
from demo.sandbox.services.notifications import (
    charge_notifications_schedule,
    refund_notifications_schedule,
)
from demo.sandbox.services.wallets import wallet_credit, wallet_debit


def late_success_enqueue(*, charge_id: int, countdown: float) -> None:
    """Hand the late success to Celery. Called only after the declined charge committed."""
    # Imported here, as in notification_enqueue: the task is registered only where
    # the sandbox is served (SANDBOX_ENABLED), not wherever the shop imports services.
    from demo.sandbox.tasks import settle_late_success

    settle_late_success.apply_async(args=(charge_id,), countdown=whole_seconds(countdown))


def late_success_schedule(*, charge: Charge) -> None:
    """Enqueue the late success of ``charge`` once its transaction commits.

    Robust: if the enqueue fails (a broker outage at that instant), the declined
    answer still goes out and the charge simply stays DECLINED, which is the
    truth GET keeps showing: nothing is half-done. ``late_success_at`` then
    stays set, visible in the admin.
    """
    assert charge.late_success_at is not None
    countdown = max(0.0, (charge.late_success_at - timezone.now()).total_seconds())

    def enqueue_late_success() -> None:  # named: Django logs a robust hook's failure by name
        late_success_enqueue(charge_id=charge.pk, countdown=countdown)

    transaction.on_commit(enqueue_late_success, robust=True)


def late_success_settle(*, charge_id: int) -> Charge | None:
    """Make a scheduled late success happen. Safe to run twice: None when already done.

    One transaction: claim (a conditional UPDATE that clears the marker; a second
    run finds no row), debit, and the conditional DECLINED -> SUCCESS with its
    notification. The charge row is locked before the wallet, as a refund does,
    so the two never deadlock. If the balance cannot cover it any more, the
    charge stays DECLINED, now for insufficient funds, and nothing is sent.
    """
    with transaction.atomic():
        claimed = Charge.objects.filter(
            pk=charge_id, status=Charge.Status.DECLINED, late_success_at__isnull=False
        ).update(late_success_at=None)
        if not claimed:
            return None
        charge = Charge.objects.select_related("wallet").get(pk=charge_id)
        # A DECLINED charge has its terms (sandbox_charge_settled_has_terms).
        assert charge.wallet_id is not None
        assert charge.amount is not None
        if not wallet_debit(wallet_id=charge.wallet_id, amount=charge.amount):
            Charge.objects.filter(pk=charge_id).update(decline_reason=DECLINE_INSUFFICIENT_FUNDS)
            charge.refresh_from_db()
            return charge
        Charge.objects.filter(pk=charge_id, status=Charge.Status.DECLINED).update(
            status=Charge.Status.SUCCESS, paid_at=timezone.now(), decline_reason=None
        )
        charge.refresh_from_db()
        charge_notifications_schedule(charge=charge)
        return charge


def refund_late_success_enqueue(*, refund_id: int, countdown: float) -> None:
    """Hand a refund's late success to Celery (after its declined row committed)."""
    from demo.sandbox.tasks import settle_refund_late_success

    settle_refund_late_success.apply_async(args=(refund_id,), countdown=whole_seconds(countdown))


def refund_late_success_schedule(*, refund: Refund) -> None:
    """Enqueue the late success of ``refund`` once its transaction commits (robust, as
    for a charge: a lost enqueue leaves the refund DECLINED, the truth GET shows)."""
    assert refund.late_success_at is not None
    countdown = max(0.0, (refund.late_success_at - timezone.now()).total_seconds())

    def enqueue_refund_late_success() -> None:
        refund_late_success_enqueue(refund_id=refund.pk, countdown=countdown)

    transaction.on_commit(enqueue_refund_late_success, robust=True)


def refund_late_success_settle(*, refund_id: int) -> Refund | None:
    """Make a refund's scheduled late success happen. None when already done.

    One transaction: claim (clear the marker), take the amount from the charge's
    refundable rest (the conditional UPDATE every refund uses), credit the
    wallet, DECLINED -> SUCCESS and its notification. The charge row is locked
    before the wallet, as for any refund.
    """
    # Imported here: services.refunds schedules this module's work, so imports it.
    from demo.sandbox.services.refunds import charge_take_refund

    with transaction.atomic():
        claimed = Refund.objects.filter(
            pk=refund_id, status=Refund.Status.DECLINED, late_success_at__isnull=False
        ).update(late_success_at=None)
        if not claimed:
            return None
        refund = Refund.objects.select_related("charge").get(pk=refund_id)
        charge = refund.charge
        if not charge_take_refund(charge=charge, amount=refund.amount):
            Refund.objects.filter(pk=refund_id).update(decline_reason=DECLINE_EXCEEDS_REFUNDABLE)
            refund.refresh_from_db()
            return refund
        assert charge.wallet_id is not None  # a refundable charge has its terms
        wallet_credit(wallet_id=charge.wallet_id, amount=refund.amount)
        Refund.objects.filter(pk=refund_id, status=Refund.Status.DECLINED).update(
            status=Refund.Status.SUCCESS,
            refunded_at=timezone.now(),
            decline_reason=None,
            currency=charge.currency,
        )
        refund.refresh_from_db()
        refund_notifications_schedule(refund=refund, faults=_late_faults(refund))
        return refund


# A refund whose notifications ``callback_drop`` dropped stays silent when it goes
# through later too: the merchant learns of it by asking, or from the statement.
_SILENT = AppliedFaults(drop_notification=True)


def _late_faults(refund: Refund) -> AppliedFaults:
    """The notification faults of a refund's late success: those of its declined answer."""
    notified = Notification.objects.filter(refund=refund).exists()
    return NO_FAULTS if notified else _SILENT
