"""Reads of the sandbox provider: the truth a merchant reconciles against."""

from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from demo.sandbox.errors import ChargeNotFound, DisputeNotFound, RefundNotFound, WalletNotFound
from demo.sandbox.models import Charge, Dispute, Fault, Refund, Wallet
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


def dispute_get(*, dispute_id: str) -> Dispute:
    if not fits_column(Dispute, "dispute_id", dispute_id):
        raise DisputeNotFound()
    dispute = Dispute.objects.select_related("charge").filter(dispute_id=dispute_id).first()
    if dispute is None:
        raise DisputeNotFound()
    return dispute


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


def wallet_disputes(*, wallet: Wallet) -> QuerySet[Dispute]:
    return Dispute.objects.select_related("charge").filter(charge__wallet=wallet)


def fault_list_active() -> QuerySet[Fault]:
    """Faults with counts left; spent rows stay for the admin's history."""
    return Fault.objects.filter(remaining__gt=0)


def statement_charges(*, start: datetime, end: datetime) -> QuerySet[Charge, tuple[Any, ...]]:
    """Successful charges paid in [start, end), in settlement order, as statement rows."""
    return (
        Charge.objects.filter(status=Charge.Status.SUCCESS, paid_at__gte=start, paid_at__lt=end)
        .order_by("paid_at", "id")
        .values_list("trade_no", "out_trade_no", "amount", "currency", "paid_at")
    )


def statement_refunds(*, start: datetime, end: datetime) -> QuerySet[Refund, tuple[Any, ...]]:
    """Refunds made in [start, end) (reversed since or not: the money did leave that
    day), in settlement order, as statement rows."""
    return (
        Refund.objects.filter(
            status__in=[Refund.Status.SUCCESS, Refund.Status.REVERSED],
            refunded_at__gte=start,
            refunded_at__lt=end,
        )
        .order_by("refunded_at", "id")
        .values_list("refund_id", "out_refund_no", "amount", "currency", "refunded_at")
    )


def statement_refund_failures(
    *, start: datetime, end: datetime
) -> QuerySet[Refund, tuple[Any, ...]]:
    """Refunds reversed in [start, end): their money came back to the merchant."""
    return (
        Refund.objects.filter(
            status=Refund.Status.REVERSED, reversed_at__gte=start, reversed_at__lt=end
        )
        .order_by("reversed_at", "id")
        .values_list("refund_id", "out_refund_no", "amount", "currency", "reversed_at")
    )


def statement_dispute_withdrawals(
    *, start: datetime, end: datetime
) -> QuerySet[Dispute, tuple[Any, ...]]:
    """Disputes opened in [start, end): their money was withdrawn from the merchant."""
    return (
        Dispute.objects.filter(opened_at__gte=start, opened_at__lt=end)
        .order_by("opened_at", "id")
        .values_list("dispute_id", "charge__out_trade_no", "amount", "currency", "opened_at")
    )


def statement_dispute_reinstatements(
    *, start: datetime, end: datetime
) -> QuerySet[Dispute, tuple[Any, ...]]:
    """Disputes won in [start, end): their money was reinstated to the merchant."""
    return (
        Dispute.objects.filter(status=Dispute.Status.WON, closed_at__gte=start, closed_at__lt=end)
        .order_by("closed_at", "id")
        .values_list("dispute_id", "charge__out_trade_no", "amount", "currency", "closed_at")
    )
