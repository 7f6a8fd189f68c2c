"""The provider's books against ours (invariant 2 of docs/design.md), for a
provider that keeps wallets: the demo's plug-in to the audit (``checks``, named in
the demo profile's ``AUDIT_PLUGINS``), not one of the shop's own checks. No real
provider keeps wallets; a fork that deletes ``demo/`` loses only this check.

Read through the provider's API (``PaymentProvider.wallet``), never its tables:
the provider is a third party, and the audit must catch it misbehaving too.
For every payer we have payments of: every successful charge is the one
capture of a PAID (or REFUNDED) order (through ``out_trade_no``, same trade,
amount and currency) or an orphaned capture given back in full; every SUCCEEDED
payment has its charge; and per currency the payer's net debit at the provider
(successful charges - successful refunds - what disputes gave back) equals our
ledger's net (captures, less refunds, plus their reversals, less disputes'
withdrawals, plus their reinstatements), orphaned captures and their refunds
included. A refund reversed is no longer a successful one at the provider,
and our reversal entry takes it back out of ours. Money of two currencies is
never added.

A charge whose attempt is still unsettled and younger than RECONCILE_AFTER_S is
in flight (a request is between the provider's answer and its settlement): it
is left out of both sides, not reported. Older, it is the reconciler's miss.
The same holds for a refund whose attempt is still unsettled and young.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime

from django.db.models import Sum
from django.utils.translation import gettext_noop as _

from edge.money import money
from operations.audit.checks import AuditContext, Checked
from operations.audit.findings import Finding
from orders.models import Order
from payments.models import (
    MONEY_IN_KINDS,
    UNSETTLED_REFUND_STATUSES,
    UNSETTLED_STATUSES,
    LedgerEntry,
    Payment,
    PaymentStatus,
    Refund,
    RefundAttemptStatus,
)
from payments.providers import (
    ChargeResult,
    ChargeStatus,
    DisputeResult,
    KeepsWallets,
    PaymentProvider,
    ProviderOutcomeUnknown,
    RefundResult,
    RefundStatus,
)
from reconcile.models import StrayCapture

CHARGE_HAS_PAID_ORDER = "provider-charge-belongs-to-one-paid-order"
PAYMENT_HAS_CHARGE = "succeeded-payment-has-provider-charge"
WALLET_MATCHES_ORDERS = "wallet-net-debit-matches-the-ledger"
PROVIDER_READABLE = "provider-wallet-readable"


def payers(ctx: AuditContext) -> Checked:
    """One wallet read per payer; ``checked`` counts payers.

    Only for a provider that keeps wallets (``KeepsWallets``: the sandbox). Another
    provider's truth reaches the audit through its query and its statement.
    """
    provider = ctx.provider
    if not isinstance(provider, KeepsWallets):
        return 0, []
    payers = list(Payment.objects.order_by("payer").values_list("payer", flat=True).distinct())
    findings: list[Finding] = []
    for payer in payers:
        findings += _payer(ctx, provider, payer=payer)
    return len(payers), findings


def _payer(ctx: AuditContext, provider: KeepsWallets, *, payer: str) -> list[Finding]:
    try:
        statement = provider.wallet(payer=payer)
    except ProviderOutcomeUnknown as error:
        # Not a pass: a check that could not run is a problem to look at.
        return [Finding(PROVIDER_READABLE, f"wallet of {payer!r}: {error}", {"payer": payer})]
    successes = [
        charge
        for charge in (statement.charges if statement else ())  # no wallet: never charged
        if charge.status is ChargeStatus.SUCCESS
    ]
    findings: list[Finding] = []

    # The provider's own arithmetic: its total is the sum of its charges, in its
    # unit (the sandbox keeps one total per wallet, whatever the currency).
    listed_total = sum(charge.amount or 0 for charge in successes)
    if statement and statement.charged_total != listed_total:
        message = (
            f"the provider's charged_total for {payer!r} is "
            f"{_wallet_total(statement.charged_total, successes)}, its successful charges "
            f"add up to {_wallet_total(listed_total, successes)}"
        )
        findings.append(Finding(WALLET_MATCHES_ORDERS, message, {"payer": payer}))

    ours = Payment.objects.select_related("order").in_bulk(
        [charge.out_trade_no for charge in successes], field_name="out_trade_no"
    )
    settled = [
        charge
        for charge in successes
        if not _in_flight(ours.get(charge.out_trade_no), since=ctx.in_flight_since)
    ]
    refunds = [
        r for r in (statement.refunds if statement else ()) if r.status is RefundStatus.SUCCESS
    ]
    if statement and statement.refunded_total != sum(r.amount or 0 for r in refunds):
        message = (
            f"the provider's refunded_total for {payer!r} is "
            f"{_wallet_total(statement.refunded_total, refunds)}, its successful refunds add "
            f"up to {_wallet_total(sum(r.amount or 0 for r in refunds), refunds)}"
        )
        findings.append(Finding(WALLET_MATCHES_ORDERS, message, {"payer": payer}))
    young = set(
        Refund.objects.filter(
            refund_no__in=[r.out_refund_no for r in refunds],
            status__in=UNSETTLED_REFUND_STATUSES,
            updated_at__gte=ctx.in_flight_since,
        ).values_list("refund_no", flat=True)
    )
    disputes = list(statement.disputes if statement else ())
    disputed = sum(d.withdrawn - d.reinstated for d in disputes)
    if statement and statement.disputed_total != disputed:
        message = (
            f"the provider's disputed_total for {payer!r} is {statement.disputed_total}, "
            f"its disputes add up to {disputed}"
        )
        findings.append(Finding(WALLET_MATCHES_ORDERS, message, {"payer": payer}))
    findings += _totals_per_currency(
        payer=payer,
        charges=settled,
        refunds=[r for r in refunds if r.out_refund_no not in young],
        disputes=disputes,
    )
    # A capture of a reference we hold no attempt for, found and refunded in full
    # (reconcile/recovery/strays.py): booked by its refund, not by an order.
    stray_refunded = set(
        StrayCapture.objects.filter(
            trade_no__in=[charge.trade_no for charge in settled],
            refund_status=RefundAttemptStatus.SUCCEEDED,
        ).values_list("trade_no", flat=True)
    )
    findings += [
        _stray_charge(payer=payer, charge=charge, payment=ours.get(charge.out_trade_no))
        for charge in settled
        if not _charge_is_booked(charge, ours.get(charge.out_trade_no))
        and charge.trade_no not in stray_refunded
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


def _wallet_total(amount: int, moves: Sequence[ChargeResult | RefundResult]) -> str:
    """A wallet's total as money when its moves share one currency; the sandbox adds
    every currency into one number, which then has no unit but the minor one."""
    currencies = sorted({move.currency for move in moves if move.currency})
    if len(currencies) == 1:
        return money(amount, currencies[0])
    return f"{amount} (minor units of {', '.join(currencies) or 'no currency'})"


def _in_flight(payment: Payment | None, *, since: datetime) -> bool:
    """Our attempt is unsettled and young: a request may be settling it right now."""
    return (
        payment is not None and payment.status in UNSETTLED_STATUSES and payment.updated_at >= since
    )


def _totals_per_currency(
    *,
    payer: str,
    charges: list[ChargeResult],
    refunds: list[RefundResult],
    disputes: list[DisputeResult],
) -> list[Finding]:
    """Per currency: the provider's net debit of the payer = our ledger's net."""
    provider_net: Counter[str] = Counter()
    for charge in charges:
        provider_net[charge.currency or "?"] += charge.amount or 0
    for refund in refunds:
        provider_net[refund.currency or "?"] -= refund.amount or 0
    for dispute in disputes:
        provider_net[dispute.currency] -= dispute.withdrawn - dispute.reinstated
    ledger_net: Counter[str] = Counter()
    for currency, kind, total in (
        LedgerEntry.objects.filter(payment__payer=payer)
        .values("currency", "kind")
        .annotate(total=Sum("amount"))
        .values_list("currency", "kind", "total")
    ):
        ledger_net[currency] += total if kind in MONEY_IN_KINDS else -total
    return [
        Finding(
            WALLET_MATCHES_ORDERS,
            f"{payer!r} is debited {money(provider_net[currency], _known(currency))} net at "
            f"the provider (charged - refunded); our ledger says "
            f"{money(ledger_net[currency], _known(currency))}",
            {"payer": payer, "currency": currency},
        )
        for currency in sorted(set(provider_net) | set(ledger_net))
        if provider_net[currency] != ledger_net[currency]
    ]


def _known(currency: str) -> str | None:
    return None if currency == "?" else currency


def _charge_is_booked(charge: ChargeResult, payment: Payment | None) -> bool:
    """The charge is our SUCCEEDED attempt of a PAID (REFUNDED) order, same trade,
    amount and currency; or an orphaned capture of ours whose refunds (less their
    reversals) and disputes gave all of it back."""
    if payment is None or payment.trade_no != charge.trade_no:
        return False
    if payment.status == PaymentStatus.ORPHANED:
        totals = dict(
            LedgerEntry.objects.filter(payment=payment)
            .values("kind")
            .annotate(total=Sum("amount"))
            .values_list("kind", "total")
        )
        kind = LedgerEntry.Kind
        given_back = (
            totals.get(kind.ORPHAN_REFUND, 0)
            - totals.get(kind.ORPHAN_REFUND_REVERSAL, 0)
            + totals.get(kind.DISPUTE_WITHDRAWAL, 0)
            - totals.get(kind.DISPUTE_REINSTATEMENT, 0)
        )
        return bool(given_back == charge.amount)
    return (
        payment.status == PaymentStatus.SUCCEEDED
        and payment.order.status in (Order.Status.PAID, Order.Status.REFUNDED)
        and payment.amount == charge.amount
        and payment.currency == charge.currency
    )


def _stray_charge(*, payer: str, charge: ChargeResult, payment: Payment | None) -> Finding:
    state = f"our attempt is {payment.status}" if payment else "we hold no such attempt"
    return Finding(
        CHARGE_HAS_PAID_ORDER,
        f"the provider charged {payer!r} {money(charge.amount, charge.currency)} for "
        f"{charge.out_trade_no} "
        f"({charge.trade_no}), but {state}",
        {
            "payer": payer,
            "out_trade_no": charge.out_trade_no,
            "trade_no": charge.trade_no,
            "payment": payment.pk if payment else None,
            "order": payment.order_id if payment else None,
        },
    )


def checks(provider: PaymentProvider) -> list[tuple[str, Callable[[AuditContext], Checked]]]:
    """The audit's plug-in (``AUDIT_PLUGINS``): the wallet check, where the provider
    keeps wallets (the sandbox); nothing for any other provider."""
    if not isinstance(provider, KeepsWallets):
        return []
    return [(_("provider: charges and net debits match the ledger"), payers)]
