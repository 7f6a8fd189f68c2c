"""Assertions several test modules share."""

from orders.models import Order
from payments.models import LedgerEntry, Payment, Refund


def assert_paid_once(order, user, wallet) -> None:
    """One debit, everywhere: order, payment, ledger, and the provider's wallet."""
    order = Order.objects.get(pk=order.pk)
    assert order.status == "PAID"
    assert order.paid_at is not None
    assert Payment.objects.filter(order=order, status="SUCCEEDED").count() == 1
    entry = LedgerEntry.objects.get(order=order)
    assert entry.amount == order.amount
    assert entry.trade_no == Payment.objects.get(order=order, status="SUCCEEDED").trade_no
    account = wallet(user)
    assert account["charged_total"] == order.amount
    assert [c["status"] for c in account["charges"]].count("SUCCESS") == 1


def assert_refunded_once(order, user, wallet, *, refunded: int) -> None:
    """``refunded`` went back, once, everywhere: order, refunds, ledger, provider's wallet."""
    order = Order.objects.get(pk=order.pk)
    assert order.refunded_amount == refunded
    assert order.status == ("REFUNDED" if refunded == order.amount else "PAID")
    succeeded = Refund.objects.filter(order=order, status="SUCCEEDED")
    assert sum(r.amount for r in succeeded) == refunded
    entries = LedgerEntry.objects.filter(order=order, kind="refund")
    assert sorted(str(e.refund_id) for e in entries) == sorted(str(r.refund_id) for r in succeeded)
    assert sum(e.amount for e in entries) == refunded
    account = wallet(user)
    assert account["charged_total"] == order.amount
    assert account["refunded_total"] == refunded
