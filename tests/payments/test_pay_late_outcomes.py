"""A new payment attempt after a declined one asks the provider about the earlier
attempt first (DESIGN.md section 7, "Late outcomes"): an asynchronous method
declined now may be paid later, and a second charge beside it would take the
customer's money twice (one of them refunded, but taken).

The provider is the real sandbox over HTTP. No Celery worker: the test carries
the late success out at the provider itself (the sandbox's own service, which
its task runs), so it lands exactly between the two pay requests.
"""

from __future__ import annotations

import pytest

from orders.models import Order
from payments.models import LedgerEntry, Payment
from reconcile.audit import audit_run
from sandbox.models import Charge
from sandbox.services.late_success import late_success_settle
from tests.reconcile.conftest import gone_provider  # noqa: F401 - a fixture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Long: the test, not the clock, carries the charge out (see the module).
LATER_S = 60


def declined_now_paid_later(pay, fault) -> Payment:
    """Pay with late_success armed (402), then the provider captures the attempt."""
    fault("late_success", delay_s=LATER_S)
    assert pay().status_code == 402
    first = Payment.objects.get()
    charge = Charge.objects.get(out_trade_no=first.out_trade_no)
    assert late_success_settle(charge_id=charge.pk) is not None
    return first


def test_a_pay_after_a_decline_the_provider_carried_out_later_charges_nothing_more(
    pay, fault, order, user, wallet
):
    # Given an attempt declined now and captured later, which the shop has not heard of
    first = declined_now_paid_later(pay, fault)
    assert Payment.objects.get(pk=first.pk).status == "FAILED"

    # When the customer pays again, with a new key
    again = pay(key := "pay-again-after-a-decline")

    # Then the earlier attempt was asked about and rolled forward: the order is PAID
    # through it, this request made no attempt and answers 409 (stored)
    assert (again.status_code, again.json()["code"]) == (409, "order-not-payable")
    assert pay(key).json() == again.json()
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert list(Payment.objects.values_list("pk", "status")) == [(first.pk, "SUCCEEDED")]
    assert LedgerEntry.objects.get(kind="capture").payment_id == first.pk
    # ... and the customer was charged once
    account = wallet(user)
    assert (account["charged_total"], account["refunded_total"]) == (order.amount, 0)
    report = audit_run()
    assert report.ok, [finding.message for finding in report.findings]


def test_a_pay_after_a_decline_waits_while_the_provider_cannot_be_asked(
    pay,
    fault,
    order,
    user,
    wallet,
    settings,
    gone_provider,  # noqa: F811 - the fixture
):
    # Given an attempt declined now (and maybe paid later: the shop cannot know yet)
    first = declined_now_paid_later(pay, fault)
    here = settings.PROVIDER_BASE_URL

    # When the customer pays again while the provider is unreachable
    settings.PROVIDER_BASE_URL = gone_provider
    answer = pay(key := "pay-while-the-provider-is-away")

    # Then 503, nothing stored, no new attempt; the same key, later, finds the truth
    assert (answer.status_code, answer.json()["code"]) == (503, "payment-outcome-unknown")
    assert list(Payment.objects.values_list("pk", flat=True)) == [first.pk]
    settings.PROVIDER_BASE_URL = here
    again = pay(key)
    assert (again.status_code, again.json()["code"]) == (409, "order-not-payable")
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    assert wallet(user)["charged_total"] == order.amount
