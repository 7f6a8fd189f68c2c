"""The audit's money sums: per currency, order amount = its lines, and no false alarm
for a charge still in flight (inside RECONCILE_AFTER_S) — while an old one stays a
finding."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db.models import F
from django.utils import timezone

from demo import wallet_audit as wallets
from demo.sandbox.models import Charge
from operations.audit.checks import amounts, captures
from operations.audit.run import AuditReport, audit_run
from orders.models import Order
from orders.services import LineRequest, order_create
from payments.models import Payment
from payments.services import payment_create
from tests.conftest import new_key
from tests.factories import ProductFactory
from tests.reconcile.conftest import charge_at_provider

pytestmark = pytest.mark.django_db(transaction=True)


def invariants(report: AuditReport) -> set[str]:
    return {finding.invariant for finding in report.findings}


def audit_exit_code() -> int:
    try:
        call_command("audit", stdout=StringIO())
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


def pay_order(pay, create_order, *, currency: str) -> Order:
    product = ProductFactory.create(currency=currency, price=500, stock=5)
    order = Order.objects.get(number=create_order(key=new_key(), sku=product.sku).json()["number"])
    assert pay(number=order.number).status_code == 200
    return order


def test_a_charge_in_flight_is_not_a_finding_until_it_is_due(user, product, sandbox, settings):
    # Given a pay request between its provider call and its settlement: the
    # sandbox has charged, the shop's attempt is still PENDING and young
    order = order_create(
        user_id=user.pk, lines=[LineRequest(sku=product.sku, quantity=1)], idempotency_key=new_key()
    )
    payment = payment_create(user_id=user.pk, order_number=order.number)
    charge_at_provider(payment)

    # When the audit runs during this normal traffic
    report = audit_run()

    # Then it is clean, and `manage.py audit` exits 0
    assert report.ok, report.findings
    assert audit_exit_code() == 0

    # But once the attempt is older than RECONCILE_AFTER_S it was the reconciler's
    # to settle: the unsettled attempt and the charge nobody booked are findings
    Payment.objects.filter(pk=payment.pk).update(
        updated_at=timezone.now() - timedelta(seconds=settings.RECONCILE_AFTER_S + 1)
    )
    report = audit_run()
    assert {
        captures.PAYMENT_SETTLED,
        wallets.CHARGE_HAS_PAID_ORDER,
        wallets.WALLET_MATCHES_ORDERS,
    } <= invariants(report)
    assert audit_exit_code() == 1


def test_a_payer_paying_in_two_currencies_audits_clean(pay, create_order, user, due_at_once):
    pay_order(pay, create_order, currency="CNY")
    pay_order(pay, create_order, currency="USD")
    call_command("reconcile", "--once", stdout=StringIO())  # ships both

    report = audit_run()

    assert report.ok, report.findings


def test_a_charge_in_another_currency_is_a_finding_per_currency(pay, create_order, user):
    # Given a paid CNY order whose charge the provider booked in USD (same amount:
    # a sum over currencies would not see it)
    order = pay_order(pay, create_order, currency="CNY")
    Charge.objects.filter(out_trade_no=Payment.objects.get(order=order).out_trade_no).update(
        currency="USD"
    )

    report = audit_run()

    mismatches = [f.ids for f in report.findings if f.invariant == wallets.WALLET_MATCHES_ORDERS]
    assert {(ids["payer"], ids["currency"]) for ids in mismatches} == {
        (user.username, "CNY"),
        (user.username, "USD"),
    }
    assert wallets.CHARGE_HAS_PAID_ORDER in invariants(report)


def test_a_capture_in_another_currency_than_its_payment_is_a_finding(pay, create_order):
    order = pay_order(pay, create_order, currency="CNY")
    Payment.objects.filter(order=order).update(currency="USD")

    report = audit_run()

    assert captures.CAPTURE_MATCHES_PAYMENT in invariants(report)


@pytest.mark.django_db
def test_an_order_whose_amount_is_not_the_sum_of_its_lines_is_a_finding(user):
    product = ProductFactory.create(price=250, stock=10)
    order = order_create(
        user_id=user.pk, lines=[LineRequest(sku=product.sku, quantity=3)], idempotency_key=new_key()
    )
    assert audit_run().ok

    Order.objects.filter(pk=order.pk).update(amount=F("amount") + 1)
    report = audit_run()

    assert [(f.invariant, f.ids) for f in report.findings] == [
        (amounts.ORDER_AMOUNT_MATCHES_LINES, {"order": order.pk, "number": order.number})
    ]
