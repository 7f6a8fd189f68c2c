"""The customer's side of a charge that waits for them (the ``requires_action`` fault).

A real provider hands the merchant's client what it needs to finish a payment
(Stripe: ``client_secret`` and ``next_action``, for 3-D Secure); the customer
then completes it or walks away. Here the customer POSTs to the charge's
``/action`` URL with the ``client_secret``: ``complete`` debits the wallet (a
decline if it cannot cover the charge), ``abandon`` declines it. Either way the
charge is settled once, by a conditional UPDATE on ``ACTION_REQUIRED`` that the
merchant's close races: whichever commits first decides, and the other finds
it settled. A customer who simply never acts leaves it waiting until the
merchant fences it.
"""

from __future__ import annotations

import secrets

from django.db import transaction
from django.utils import timezone

from demo.sandbox.errors import ChargeNotAwaitingAction, ClientSecretInvalid
from demo.sandbox.models import Charge
from demo.sandbox.serializers import charge_json
from demo.sandbox.services.declines import DECLINE_ABANDONED, DECLINE_INSUFFICIENT_FUNDS
from demo.sandbox.services.notifications import charge_notifications_schedule
from demo.sandbox.services.wallets import wallet_debit


def charge_customer_act(*, out_trade_no: str, client_secret: str, complete: bool) -> Charge:
    """Complete or abandon the charge waiting for its customer; the charge it became."""
    with transaction.atomic():
        charge = (
            Charge.objects.select_for_update(of=("self",))
            .select_related("wallet")
            .filter(out_trade_no=out_trade_no, client_secret__isnull=False)
            .first()
        )
        if charge is None or not secrets.compare_digest(
            client_secret.encode(), (charge.client_secret or "").encode()
        ):
            raise ClientSecretInvalid()
        if charge.status != Charge.Status.ACTION_REQUIRED:
            # Settled by the customer before, or fenced by the merchant's close.
            raise ChargeNotAwaitingAction(charge=charge_json(charge))
        # A waiting charge has its terms (the sandbox_charge_settled_has_terms check).
        assert charge.wallet_id is not None
        assert charge.amount is not None
        if complete and wallet_debit(wallet_id=charge.wallet_id, amount=charge.amount):
            changes = {"status": Charge.Status.SUCCESS, "paid_at": timezone.now()}
        else:
            reason = DECLINE_INSUFFICIENT_FUNDS if complete else DECLINE_ABANDONED
            changes = {"status": Charge.Status.DECLINED, "decline_reason": reason}
        # WHERE status = 'ACTION_REQUIRED': the row lock above already serialises us
        # with a close, and the condition says so in the statement itself.
        moved = Charge.objects.filter(pk=charge.pk, status=Charge.Status.ACTION_REQUIRED).update(
            **changes
        )
        if not moved:  # pragma: no cover - the row lock makes this unreachable
            raise ChargeNotAwaitingAction(charge=charge_json(charge))
        for name, value in changes.items():
            setattr(charge, name, value)
        # Settled now: notified like any settled charge (at commit).
        charge_notifications_schedule(charge=charge)
    return charge
