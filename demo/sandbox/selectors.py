"""Reads of the sandbox provider: the truth a merchant reconciles against."""

from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from demo.sandbox.errors import ChargeNotFound, RefundNotFound, WalletNotFound
from demo.sandbox.models import Charge, Fault, Refund, Wallet
from edge.bounds import fits_column


def charge_get(*, out_trade_no: str) -> Charge:
    # A reference no row can hold (NUL, overlong) names no charge: never sent to SQL.
    if not fits_column(Charge, "out_trade_no", out_trade_no):
        raise ChargeNotFound()
    charge = Charge.objects.select_related("wallet").filter(out_trade_no=out_trade_no).first()
    if charge is None:
        raise ChargeNotFound()
    return charge


def refund_get(*, out_refund_no: str) -> Refund:
    if not fits_column(Refund, "out_refund_no", out_refund_no):
        raise RefundNotFound()
    refund = Refund.objects.select_related("charge").filter(out_refund_no=out_refund_no).first()
    if refund is None:
        raise RefundNotFound()
    return refund


def wallet_get(*, payer: str) -> Wallet:
    if not fits_column(Wallet, "payer", payer):
        raise WalletNotFound()
    wallet = Wallet.objects.filter(payer=payer).first()
    if wallet is None:
        raise WalletNotFound()
    return wallet


def wallet_charges(*, wallet: Wallet) -> QuerySet[Charge]:
    return Charge.objects.select_related("wallet").filter(wallet=wallet)


def wallet_refunds(*, wallet: Wallet) -> QuerySet[Refund]:
    return Refund.objects.select_related("charge").filter(charge__wallet=wallet)


def fault_list_active() -> QuerySet[Fault]:
    """Faults with counts left; spent rows stay for the admin's history."""
    return Fault.objects.filter(remaining__gt=0)


def statement_charges(*, start: datetime, end: datetime) -> QuerySet[Charge, tuple[Any, ...]]:
    """Successful charges paid in [start, end), in settlement order, as statement rows."""
    return (
        Charge.objects.filter(status=Charge.Status.SUCCESS, paid_at__gte=start, paid_at__lt=end)
        .order_by("paid_at", "id")
        .values_list("trade_no", "out_trade_no", "amount", "currency", "status", "paid_at")
    )


def statement_refunds(*, start: datetime, end: datetime) -> QuerySet[Refund, tuple[Any, ...]]:
    """Successful refunds made in [start, end), in settlement order, as statement rows."""
    return (
        Refund.objects.filter(
            status=Refund.Status.SUCCESS, refunded_at__gte=start, refunded_at__lt=end
        )
        .order_by("refunded_at", "id")
        .values_list("refund_id", "out_refund_no", "amount", "currency", "status", "refunded_at")
    )
