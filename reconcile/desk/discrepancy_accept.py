"""A person's ``accept`` on a statement discrepancy: the provider's word, applied.

The line (or the ledger entry) names an attempt of the shop's; the provider is
asked about it, and only a confirmed success is applied, by the services every
other path settles through (``payment_settle_from_account``, ``refund_settle``), so a
second click, or a pass running beside it, settles the attempt once.
"""

from __future__ import annotations

from operations.statements.models import LineKind, StatementDiscrepancy
from payments.models import Payment, Refund
from payments.providers import ChargeStatus, PaymentProvider, RefundStatus
from payments.refunds import refund_settle
from reconcile.recovery.unsettled_payments import SETTLED, payment_settle_from_account


def discrepancy_accept(
    discrepancy: StatementDiscrepancy, *, provider: PaymentProvider
) -> tuple[bool, str]:
    """Ask the provider about the discrepancy's attempt and settle from a confirmed answer
    through the normal settle services (conditional: a second click changes nothing).
    (settled, what the provider said); raises ProviderOutcomeUnknown."""
    payment, refund = _attempt_of(discrepancy)
    if payment is not None:
        account = provider.query(out_trade_no=payment.out_trade_no)
        if account is None or account.status is not ChargeStatus.SUCCESS:
            return False, f"the provider's word on {payment.out_trade_no}: " + (
                account.status if account else "no charge"
            )
        resolution = payment_settle_from_account(payment_id=payment.pk, account=account)
        return resolution.value in SETTLED, f"the provider's word on {payment.out_trade_no}: " + (
            f"captured, {resolution.value}"
        )
    if refund is not None:
        answer = provider.query_refund(out_refund_no=refund.refund_no)
        if answer is None or answer.status is not RefundStatus.SUCCESS:
            return False, f"the provider's word on {refund.refund_no}: " + (
                answer.status if answer else "no refund"
            )
        settled = refund_settle(refund_attempt_id=refund.pk, result=answer, confirmed=True)
        return True, f"the provider's word on {refund.refund_no}: refunded, {settled.outcome.value}"
    return False, "no attempt of the shop's to ask the provider about"


def _attempt_of(discrepancy: StatementDiscrepancy) -> tuple[Payment | None, Refund | None]:
    if discrepancy.line is not None:
        reference = discrepancy.line.reference
        if discrepancy.line.kind == LineKind.CHARGE:
            return Payment.objects.filter(out_trade_no=reference).first(), None
        return None, Refund.objects.filter(refund_no=reference).first()
    entry = discrepancy.ledger_entry
    if entry is None:
        return None, None
    if entry.refund_attempt_id is not None:
        return None, entry.refund_attempt
    return entry.payment, None
