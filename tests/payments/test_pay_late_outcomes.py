"""A new payment attempt after a declined one asks the provider about the earlier
attempt first (docs/design.md, "Late outcomes"): an asynchronous method
declined now may be paid later, and a second charge beside it would take the
customer's money twice (one of them refunded, but taken). A new refund after a
declined one does the same: the declined one may have gone through later, and
what is left to refund is smaller than the books said.

The provider is the real sandbox over HTTP. No Celery worker: the test carries
the late success out at the provider itself (the sandbox's own service, which
its task runs), so it lands exactly between the two pay requests.
"""

from __future__ import annotations

from typing import Any

import pytest

from demo.sandbox.models import Charge
from demo.sandbox.models import Refund as ProviderRefund
from demo.sandbox.services.late_success import late_success_settle, refund_late_success_settle
from operations.audit.run import audit_run
from orders.models import Order
from payments.earlier import MAX_EARLIER_ASKED, earlier_asks_allowed
from payments.flows import _settle_earlier_attempts
from payments.models import LedgerEntry, Payment, Refund
from payments.providers import get_provider
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


class CountingProvider:
    """The real provider, noting which references it was asked about."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.asked: list[str] = []

    def query(self, *, out_trade_no: str, trade_no: str | None = None) -> Any:
        self.asked.append(out_trade_no)
        return self.real.query(out_trade_no=out_trade_no, trade_no=trade_no)

    def query_refund(self, *, out_refund_no: str, trade_no: str | None = None) -> Any:
        self.asked.append(out_refund_no)
        return self.real.query_refund(out_refund_no=out_refund_no, trade_no=trade_no)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_pay_asks_only_about_attempts_that_can_still_succeed_and_only_a_few(
    pay, fault, order, user, settings
):
    # Given six declined attempts, the two oldest of them then fenced (closed)
    for _ in range(6):
        fault("decline")
        assert pay().status_code == 402
    attempts = list(Payment.objects.order_by("pk"))
    Payment.objects.filter(pk__in=[p.pk for p in attempts[:2]]).update(failure_code="closed")

    # When the next pay asks about the earlier ones
    provider = CountingProvider(get_provider())
    _settle_earlier_attempts(user_id=user.pk, order_number=order.number, provider=provider)

    # Then it asked about the newest declined ones only, as many as the lock allows
    newest = [p.out_trade_no for p in reversed(attempts[2:])]
    assert provider.asked == newest[:MAX_EARLIER_ASKED]
    assert len(newest) > MAX_EARLIER_ASKED
    # ... and none at all when one ask would not fit in the key lock's budget
    settings.PROVIDER_TIMEOUT_S = settings.IDEMPOTENCY_LOCK_TIMEOUT / 4
    provider.asked.clear()
    _settle_earlier_attempts(user_id=user.pk, order_number=order.number, provider=provider)
    assert provider.asked == []


def test_the_asks_with_the_own_call_fit_in_the_lock_budget(settings):
    for timeout_s, lock_s in [(5.0, 60), (1.0, 60), (10.0, 60), (5.0, 30), (30.0, 60)]:
        settings.PROVIDER_TIMEOUT_S, settings.IDEMPOTENCY_LOCK_TIMEOUT = timeout_s, lock_s
        asks = earlier_asks_allowed()
        assert 0 <= asks <= MAX_EARLIER_ASKED
        # every ask and the request's own call at their worst, and a margin
        assert (asks + 1) * 2 * timeout_s + timeout_s <= lock_s or asks == 0
    settings.PROVIDER_TIMEOUT_S, settings.IDEMPOTENCY_LOCK_TIMEOUT = 5.0, 60
    assert earlier_asks_allowed() == 3


# --- A refund after a declined refund ----------------------------------------------


def refund_declined_now_done_later(refund, fault, *, amount: int) -> Refund:
    """Refund ``amount`` with late_success armed (402), then the provider carries it out."""
    fault("late_success", target="refund", delay_s=LATER_S)
    first = refund(body={"amount": amount})
    assert (first.status_code, first.json()["code"]) == (402, "refund-declined")
    declined = Refund.objects.get()
    at_provider = ProviderRefund.objects.get(out_refund_no=declined.refund_no)
    assert refund_late_success_settle(refund_id=at_provider.pk) is not None
    return declined


def test_a_refund_after_a_declined_one_the_provider_carried_out_later_refunds_no_more(
    paid_order, refund, fault, user, wallet
):
    # Given a refund of most of the order, declined now and carried out later
    most = paid_order.amount * 2 // 3
    first = refund_declined_now_done_later(refund, fault, amount=most)
    assert Refund.objects.get(pk=first.pk).status == "FAILED"  # the shop has not heard

    # When the customer asks for the same refund again, with a new key
    again = refund(key := "refund-again-after-a-decline", body={"amount": most})

    # Then the earlier one was asked about and booked; the new one no longer fits
    # what is left, is refused (stored), and nothing more went to the provider
    assert (again.status_code, again.json()["code"]) == (409, "refund-exceeds-paid")
    assert refund(key, body={"amount": most}).json() == again.json()
    assert list(Refund.objects.values_list("pk", "status")) == [(first.pk, "SUCCEEDED")]
    [entry] = LedgerEntry.objects.filter(kind="refund")
    assert (entry.refund_attempt_id, entry.amount) == (first.pk, most)
    paid_order.refresh_from_db()
    assert (paid_order.status, paid_order.refunded_amount) == ("PAID", most)
    assert ProviderRefund.objects.count() == 1
    assert wallet(user)["refunded_total"] == most
    report = audit_run()
    assert report.ok, [finding.message for finding in report.findings]


def test_a_refund_after_a_declined_one_carried_out_later_refunds_the_rest_only(
    paid_order, refund, fault, user, wallet
):
    # Given a partial refund declined now and carried out later
    part = paid_order.amount // 4
    first = refund_declined_now_done_later(refund, fault, amount=part)

    # When the customer asks for the whole rest, with a new key
    rest = refund()

    # Then the late one is booked and the new one refunds what is left: all of it, once
    assert rest.status_code == 200, rest.content
    assert rest.json()["refunded_amount"] == paid_order.amount
    statuses = dict(Refund.objects.values_list("pk", "status"))
    assert statuses.pop(first.pk) == "SUCCEEDED"
    assert list(statuses.values()) == ["SUCCEEDED"]
    assert sorted(LedgerEntry.objects.filter(kind="refund").values_list("amount", flat=True)) == (
        sorted([part, paid_order.amount - part])
    )
    assert wallet(user)["refunded_total"] == paid_order.amount
    assert Order.objects.get(pk=paid_order.pk).status == "REFUNDED"


def test_a_refund_after_a_decline_waits_while_the_provider_cannot_be_asked(
    paid_order,
    refund,
    fault,
    user,
    wallet,
    settings,
    gone_provider,  # noqa: F811 - the fixture
):
    # Given a refund declined now (and maybe carried out later: the shop cannot know)
    first = refund_declined_now_done_later(refund, fault, amount=paid_order.amount)
    here = settings.PROVIDER_BASE_URL

    # When the customer asks again while the provider is unreachable
    settings.PROVIDER_BASE_URL = gone_provider
    answer = refund(key := "refund-while-the-provider-is-away")

    # Then 503, nothing stored, no new attempt; the same key, later, finds the truth
    assert (answer.status_code, answer.json()["code"]) == (503, "refund-outcome-unknown")
    assert list(Refund.objects.values_list("pk", flat=True)) == [first.pk]
    settings.PROVIDER_BASE_URL = here
    again = refund(key)
    assert (again.status_code, again.json()["code"]) == (409, "order-not-refundable")
    assert Order.objects.get(pk=paid_order.pk).status == "REFUNDED"
    assert wallet(user)["refunded_total"] == paid_order.amount
    assert ProviderRefund.objects.count() == 1
