"""Assertions several test modules share."""

from orders.models import Order
from payments.models import LedgerEntry, Payment


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
