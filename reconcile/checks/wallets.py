"""The provider's books against ours (invariant 2 of DESIGN.md section 9).

Read through the provider's API (``PaymentProvider.wallet``), never its tables:
the provider is a third party, and the audit must catch it misbehaving too.
For every payer we have payments of: every successful charge is the one
capture of a PAID (or REFUNDED) order, or an orphaned capture refunded in full;
every SUCCEEDED payment has its charge; and the wallet's net debit
(``charged_total - refunded_total``) equals what our ledger says we captured
minus what we refunded for that payer, orphaned captures and their refunds
included.
"""

from __future__ import annotations

from django.db.models import Sum
from django.db.models.functions import Coalesce

from orders.models import Order
from payments.models import CAPTURE_KINDS, REFUND_KINDS, LedgerEntry, Payment, PaymentStatus
from payments.providers import ChargeResult, ChargeStatus, ProviderOutcomeUnknown
from reconcile.checks import AuditContext, Checked
from reconcile.findings import Finding

CHARGE_HAS_PAID_ORDER = "provider-charge-belongs-to-one-paid-order"
PAYMENT_HAS_CHARGE = "succeeded-payment-has-provider-charge"
WALLET_MATCHES_ORDERS = "wallet-net-debit-matches-the-ledger"
PROVIDER_READABLE = "provider-wallet-readable"


def payers(ctx: AuditContext) -> Checked:
    """One wallet read per payer; ``checked`` counts payers."""
    payers = list(Payment.objects.order_by("payer").values_list("payer", flat=True).distinct())
    findings: list[Finding] = []
    for payer in payers:
        findings += _payer(ctx, payer=payer)
    return len(payers), findings


def _payer(ctx: AuditContext, *, payer: str) -> list[Finding]:
    try:
        statement = ctx.provider.wallet(payer=payer)
    except ProviderOutcomeUnknown as error:
        # Not a pass: a check that could not run is a problem to look at.
        return [Finding(PROVIDER_READABLE, f"wallet of {payer!r}: {error}", {"payer": payer})]
    # No wallet: never charged.
    net_debit = statement.charged_total - statement.refunded_total if statement else 0
    successes = [
        charge
        for charge in (statement.charges if statement else ())
        if charge.status is ChargeStatus.SUCCESS
    ]
    findings: list[Finding] = []

    booked = _ledger_total(payer, CAPTURE_KINDS) - _ledger_total(payer, REFUND_KINDS)
    if net_debit != booked:
        message = (
            f"{payer!r} is debited {net_debit} net at the provider (charged "
            f"{statement.charged_total if statement else 0}, refunded "
            f"{statement.refunded_total if statement else 0}); our ledger says {booked}"
        )
        findings.append(Finding(WALLET_MATCHES_ORDERS, message, {"payer": payer}))

    ours = Payment.objects.select_related("order").in_bulk(
        [charge.out_trade_no for charge in successes], field_name="out_trade_no"
    )
    findings += [
        _stray_charge(payer=payer, charge=charge, payment=ours.get(charge.out_trade_no))
        for charge in successes
        if not _charge_is_booked(charge, ours.get(charge.out_trade_no))
    ]

    charged = {charge.trade_no for charge in successes}
    findings += [
        Finding(
            PAYMENT_HAS_CHARGE,
            f"payment {p['out_trade_no']} SUCCEEDED as {p['trade_no']}, but the provider "
            "holds no successful charge for it",
            {"payment": p["pk"], "order": p["order_id"], "out_trade_no": p["out_trade_no"]},
        )
        for p in Payment.objects.filter(payer=payer, status=PaymentStatus.SUCCEEDED)
        .exclude(trade_no__in=charged)
        .order_by("pk")
        .values("pk", "order_id", "out_trade_no", "trade_no")
    ]
    return findings


def _ledger_total(payer: str, kinds: tuple[str, ...]) -> int:
    return int(
        LedgerEntry.objects.filter(payment__payer=payer, kind__in=kinds).aggregate(
            total=Coalesce(Sum("amount"), 0)
        )["total"]
    )


def _charge_is_booked(charge: ChargeResult, payment: Payment | None) -> bool:
    """The charge is our SUCCEEDED attempt of a PAID (REFUNDED) order, same trade and
    amount; or an orphaned capture of ours whose refunds gave all of it back."""
    if payment is None or payment.trade_no != charge.trade_no:
        return False
    if payment.status == PaymentStatus.ORPHANED:
        refunded = LedgerEntry.objects.filter(
            payment=payment, kind=LedgerEntry.Kind.ORPHAN_REFUND
        ).aggregate(total=Coalesce(Sum("amount"), 0))["total"]
        return bool(refunded == charge.amount)
    return (
        payment.status == PaymentStatus.SUCCEEDED
        and payment.order.status in (Order.Status.PAID, Order.Status.REFUNDED)
        and payment.amount == charge.amount
    )


def _stray_charge(*, payer: str, charge: ChargeResult, payment: Payment | None) -> Finding:
    state = f"our attempt is {payment.status}" if payment else "we hold no such attempt"
    return Finding(
        CHARGE_HAS_PAID_ORDER,
        f"the provider charged {payer!r} {charge.amount} for {charge.out_trade_no} "
        f"({charge.trade_no}), but {state}",
        {
            "payer": payer,
            "out_trade_no": charge.out_trade_no,
            "trade_no": charge.trade_no,
            "payment": payment.pk if payment else None,
            "order": payment.order_id if payment else None,
        },
    )
