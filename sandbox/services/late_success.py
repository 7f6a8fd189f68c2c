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
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from sandbox.models import Charge
from sandbox.services.declines import DECLINE_INSUFFICIENT_FUNDS
from sandbox.services.notifications import charge_notifications_schedule
from sandbox.services.wallets import wallet_debit


def late_success_enqueue(*, charge_id: int, countdown: float) -> None:
    """Hand the late success to Celery. Called only after the declined charge committed."""
    # Imported here, as in notification_enqueue: the task is registered only where
    # the sandbox is served (SANDBOX_ENABLED), not wherever the shop imports services.
    from sandbox.tasks import settle_late_success

    settle_late_success.apply_async(args=(charge_id,), countdown=countdown)


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
