"""Moving a payer's money: conditional UPDATEs only, never read-modify-write."""

from __future__ import annotations

from django.conf import settings
from django.db.models import F

from demo.sandbox.models import Wallet


def wallet_get_or_create(*, payer: str) -> Wallet:
    # ON CONFLICT DO NOTHING: if a concurrent request is creating the same wallet,
    # the INSERT waits for it and then does nothing; the SELECT sees its row.
    Wallet.objects.bulk_create(
        [Wallet(payer=payer, balance=settings.SANDBOX_WALLET_START)], ignore_conflicts=True
    )
    return Wallet.objects.get(payer=payer)


def wallet_debit(*, wallet_id: int, amount: int) -> bool:
    """Take ``amount`` if the balance covers it. False (nothing taken) otherwise."""
    return bool(
        Wallet.objects.filter(pk=wallet_id, balance__gte=amount).update(
            balance=F("balance") - amount, charged_total=F("charged_total") + amount
        )
    )


def wallet_credit(*, wallet_id: int, amount: int) -> None:
    """Give back ``amount`` of what was charged (a refund the charge already allowed).

    The CHECK ``refunded_total <= charged_total`` backs the charge's own limit: a
    bug that credited more than was ever taken fails here instead of minting money.
    """
    updated = Wallet.objects.filter(pk=wallet_id).update(
        balance=F("balance") + amount, refunded_total=F("refunded_total") + amount
    )
    if updated != 1:
        raise RuntimeError(f"wallet {wallet_id} vanished during a refund")


def wallet_uncredit(*, wallet_id: int, amount: int) -> bool:
    """Take back a refund's credit that never reached the payer (a refund reversed).

    False (nothing taken) when the balance no longer holds it: the payer spent
    the money meanwhile, and the provider cannot reverse what is gone.
    """
    return bool(
        Wallet.objects.filter(pk=wallet_id, balance__gte=amount, refunded_total__gte=amount).update(
            balance=F("balance") - amount, refunded_total=F("refunded_total") - amount
        )
    )


def wallet_dispute_credit(*, wallet_id: int, amount: int) -> None:
    """Give a disputed charge's money back to the payer (the dispute withdrew it from
    the merchant). The CHECK on ``disputed_total`` keeps it within what is left of
    the charges."""
    updated = Wallet.objects.filter(pk=wallet_id).update(
        balance=F("balance") + amount, disputed_total=F("disputed_total") + amount
    )
    if updated != 1:
        raise RuntimeError(f"wallet {wallet_id} vanished during a dispute")
