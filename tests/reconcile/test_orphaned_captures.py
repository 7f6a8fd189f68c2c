"""Orphaned captures (docs/design.md): money the provider captured always ends as
the one capture of a PAID order or refunded, and the books balance either way.

The provider is the real sandbox over HTTP; its late successes and notifications
are Celery tasks run by a real worker, which delivers them to the shop's
callback endpoint. Each case ends rolled forward or refunded, the audit clean,
and the wallet's net debit equal to what the ledger captured minus refunded.
"""

import threading
import time
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db.models import Sum

from callbacks.models import ProviderNotification
from demo.sandbox.models import Charge as ProviderCharge
from observability.metrics.gauges import gauge_values
from operations.audit.run import audit_run
from operations.statements.passes import pass_run_once
from orders.models import Order
from payments.models import LedgerEntry, Payment, Refund
from payments.providers import get_provider
from payments.services import payment_create, payment_mark_unknown, provider_idempotency_key
from reconcile.passes import RECONCILE_NOTIFICATIONS, RECONCILE_REFUNDS, job_run
from reconcile.recovery import expiry
from tests.assertions import assert_paid_once
from tests.callbacks.test_api import body_for, notify
from tests.conftest import new_key

# Every test runs beside the real worker; it settles after each one (tests/conftest.py).
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.usefixtures("worker"),
]

# Long enough for the test to act on the declined attempt first, short enough to wait on.
LATE_S = 1.0
# How long the slow provider holds its answer after charging: the test's notification
# and pay land in between, even on a loaded machine.
ANSWER_DELAY_S = 5


def charged_unanswered(order: Order) -> Payment:
    """The order's attempt once the provider has charged it (its answer still held back):
    our row alone exists before the provider is even asked."""
    deadline = time.monotonic() + 10
    while not ProviderCharge.objects.filter(
        out_trade_no__in=Payment.objects.filter(order=order).values("out_trade_no"),
        status="SUCCESS",
    ).exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return Payment.objects.get(order=order)


def success_notified(worker, payment: Payment) -> ProviderNotification:
    """Wait for the provider's SUCCESS notification of ``payment`` to be recorded."""
    return worker.wait_for(
        lambda: ProviderNotification.objects.filter(
            out_trade_no=payment.out_trade_no, trade_status="SUCCESS"
        ).first(),
        timeout=LATE_S * 5 + 30,
        what=f"the late success of {payment.out_trade_no}",
    )


def declined_late(pay, fault, *, delay_s: float = LATE_S) -> Payment:
    """Pay once with late_success armed: declined now (402), captured after ``delay_s``."""
    fault("late_success", delay_s=delay_s)
    assert pay().status_code == 402
    return Payment.objects.get(status="FAILED")


def ledger_net(user) -> int:
    def total(*kinds: str) -> int:
        entries = LedgerEntry.objects.filter(payment__payer=user.username, kind__in=kinds)
        return entries.aggregate(total=Sum("amount"))["total"] or 0

    return total("capture", "orphan_capture") - total("refund", "orphan_refund")


def assert_books_balance(user, wallet) -> None:
    report = audit_run()
    assert report.ok, [finding.message for finding in report.findings]
    account = wallet(user)
    assert account["charged_total"] - account["refunded_total"] == ledger_net(user)
    assert not ProviderNotification.objects.filter(
        outcome__in=["deferred", "rejected", "unmatched"], resolved_at__isnull=True
    ).exists()


def assert_orphan_refunded(payment: Payment, *, why: str, amount: int) -> None:
    payment.refresh_from_db()
    assert (payment.status, payment.failure_code) == ("ORPHANED", why)
    capture = LedgerEntry.objects.get(payment=payment, kind="orphan_capture")
    assert capture.amount == amount
    [refund] = Refund.objects.filter(payment=payment, order__isnull=True)
    assert (refund.status, refund.amount, refund.reason) == (
        "SUCCEEDED",
        amount,
        "orphaned-capture",
    )
    assert LedgerEntry.objects.get(refund_attempt=refund).kind == "orphan_refund"


# --- Rolled forward: the order can still take the money ------------------------------


def test_a_late_success_after_a_decline_rolls_the_order_forward(
    pay, fault, order, user, wallet, worker, due_at_once
):
    # Given an attempt declined now that the provider captures later
    payment = declined_late(pay, fault)
    assert success_notified(worker, payment).outcome == "deferred"  # never moved backwards

    # When the reconciler asks the provider
    pass_run_once()

    # Then the attempt is rolled forward (FAILED -> SUCCEEDED) and the order is PAID
    payment.refresh_from_db()
    assert (payment.status, payment.failure_code) == ("SUCCEEDED", "")
    assert_paid_once(order, user, wallet)
    assert not Refund.objects.exists()
    assert ProviderNotification.objects.get(trade_status="SUCCESS").resolved_at is not None
    assert_books_balance(user, wallet)


def test_a_success_after_the_attempt_was_closed_rolls_forward_when_the_query_confirms(
    pay, fault, order, user, wallet, worker, due_at_once
):
    payment = declined_late(pay, fault)
    # The shop fenced the attempt; this provider cannot recall a payer's late money.
    get_provider().close(out_trade_no=payment.out_trade_no)
    success_notified(worker, payment)

    pass_run_once()

    assert Payment.objects.get(pk=payment.pk).status == "SUCCEEDED"
    assert_paid_once(order, user, wallet)
    assert_books_balance(user, wallet)


def test_the_pay_answer_itself_rolls_forward_an_attempt_failed_meanwhile(
    pay, fault, order, user, wallet, settings
):
    # Given a pay request waiting on a slow provider that will answer SUCCESS (its own
    # notification of the charge dropped: else, delivered first on a busy machine, it
    # would settle the attempt before the contradicting one below)
    settings.PROVIDER_TIMEOUT_S = 10
    fault("timeout_after_commit", delay_s=ANSWER_DELAY_S)
    fault("callback_drop")
    answers: dict[str, Any] = {}
    request = threading.Thread(target=lambda: answers.setdefault("pay", pay()))
    request.start()
    # ... and a contradicting DECLINED notification that fails the attempt meanwhile
    payment = charged_unanswered(order)
    assert notify(body_for(payment, trade_status="DECLINED")).status_code == 200
    assert Payment.objects.get(pk=payment.pk).status == "FAILED"

    # When the provider's answer (SUCCESS) arrives
    request.join()

    # Then the flow asked the provider and rolled the attempt forward
    assert answers["pay"].status_code == 200
    assert answers["pay"].json()["status"] == "PAID"
    assert_paid_once(order, user, wallet)


# --- Refunded: the order cannot take the money -------------------------------------


def test_a_pay_after_a_contradicting_notification_finds_the_first_capture_and_charges_once(
    pay, fault, order, user, wallet, settings, due_at_once
):
    # Given a pay request waiting on a slow provider that has charged (SUCCESS, not
    # answered yet), and its attempt failed meanwhile by a contradicting notification
    settings.PROVIDER_TIMEOUT_S = 10
    # A lock with room for one ask about an earlier attempt at that timeout (payments.earlier)
    settings.IDEMPOTENCY_LOCK_TIMEOUT = 120
    fault("timeout_after_commit", delay_s=ANSWER_DELAY_S)
    answers: dict[str, Any] = {}
    request = threading.Thread(target=lambda: answers.setdefault("pay", pay()))
    request.start()
    first = charged_unanswered(order)
    assert notify(body_for(first, trade_status="DECLINED")).status_code == 200

    # When the customer pays again with a new key
    again = pay()

    # Then the new request asks the provider about the failed attempt first, finds its
    # capture and rolls the order forward through it: nothing is charged again, and
    # the new key's answer is 409 order-not-payable (stored: the order is paid)
    assert again.status_code == 409
    assert again.json()["code"] == "order-not-payable"
    assert Payment.objects.filter(order=order).count() == 1
    request.join()
    assert answers["pay"].status_code == 200
    assert answers["pay"].json()["status"] == "PAID"
    assert_paid_once(order, user, wallet)


def test_a_late_success_for_an_order_paid_by_another_attempt_is_refunded(
    pay, fault, order, user, wallet, worker, due_at_once
):
    # Given an attempt declined now, and the order paid by a second attempt
    late = declined_late(pay, fault)
    assert pay().status_code == 200
    success_notified(worker, late)

    pass_run_once()

    # Then the late capture is booked as an orphan and refunded; the order is untouched
    assert_orphan_refunded(late, why="order-paid", amount=order.amount)
    order.refresh_from_db()
    assert (order.status, order.refunded_amount) == ("PAID", 0)
    account = wallet(user)
    assert (account["charged_total"], account["refunded_total"]) == (2 * order.amount, order.amount)
    assert_books_balance(user, wallet)


def orphan_gauges() -> dict[str, float]:
    """The gauges /metrics serves about orphans and refunds, read as a scrape reads them."""
    return {
        gauge.name: gauge.value
        for gauge in gauge_values()
        if gauge.name.startswith(("onceshop_orphaned_captures", "onceshop_refunds_unresolved"))
    }


def test_an_orphaned_capture_is_counted_until_its_refund_succeeds(
    pay, fault, order, user, wallet, worker, due_at_once
):
    # Given a late capture for an order another attempt paid
    late = declined_late(pay, fault)
    assert pay().status_code == 200
    success_notified(worker, late)

    # When only the notifications job runs: the capture is booked, its refund started
    job_run(RECONCILE_NOTIFICATIONS)

    # Then it is an orphaned capture awaiting its refund (what the alert bounds)
    during = orphan_gauges()
    assert during["onceshop_orphaned_captures_unrefunded"] == 1
    assert during["onceshop_orphaned_captures_unrefunded_oldest_age_seconds"] > 0
    assert during["onceshop_refunds_unresolved"] == 1  # the orphan refund, not sent yet

    # When the refunds job sends the refund
    job_run(RECONCILE_REFUNDS)

    # Then the money is back and every gauge is zero again
    assert_orphan_refunded(late, why="order-paid", amount=order.amount)
    assert set(orphan_gauges().values()) == {0.0}
    assert_books_balance(user, wallet)


def test_a_late_success_for_a_cancelled_order_is_refunded(
    pay, fault, client, order, user, wallet, worker, due_at_once
):
    late = declined_late(pay, fault)
    cancel = client.post(
        f"/api/v1/orders/{order.number}/cancel/", headers={"Idempotency-Key": new_key()}
    )
    assert cancel.status_code == 200
    success_notified(worker, late)

    pass_run_once()

    assert_orphan_refunded(late, why="order-cancelled", amount=order.amount)
    assert Order.objects.get(pk=order.pk).status == "CANCELLED"
    assert wallet(user)["refunded_total"] == order.amount
    assert_books_balance(user, wallet)


def test_a_late_success_for_an_expired_order_is_refunded(
    pay, fault, order, user, wallet, worker, due_at_once, settings
):
    # The capture must come after the expiry (sooner, the order is rolled forward):
    # a margin a loaded CI machine cannot eat between the 402 and the expiry pass.
    late = declined_late(pay, fault, delay_s=LATE_S * 5)
    settings.ORDER_TTL_S = 0
    # An expiry pass skips an order another writer holds at that instant (SKIP LOCKED):
    # the next pass takes it, well before the capture.
    deadline = time.monotonic() + LATE_S * 2
    while expiry.run_once().expired == 0:
        order.refresh_from_db()
        assert time.monotonic() < deadline, (order.status, late.out_trade_no)
        time.sleep(0.1)  # the passes' own schedule, much shortened
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED
    assert not Payment.objects.filter(order=order, status="SUCCEEDED").exists()
    success_notified(worker, late)

    pass_run_once()

    assert_orphan_refunded(late, why="order-cancelled", amount=order.amount)
    assert_books_balance(user, wallet)


def test_a_capture_of_another_amount_confirmed_by_the_query_fails_the_attempt_and_is_refunded(
    order, user, wallet, fault, due_at_once
):
    # Given an attempt the provider captured for another amount, and its notification
    # saying so (sent here by hand: the sandbox would retry a 422 for ever)
    payment = payment_create(user_id=user.pk, order_number=order.number)
    fault("callback_drop")
    captured = get_provider().charge(
        out_trade_no=payment.out_trade_no,
        amount=payment.amount + 1,
        currency=payment.currency,
        payer=payment.payer,
        notify_url=f"{django_settings.SHOP_BASE_URL}/api/v1/callbacks/sandbox/",
        idempotency_key=provider_idempotency_key(payment),
    )
    payment_mark_unknown(payment_id=payment.pk)
    mismatch = notify(body_for(payment, trade_no=captured.trade_no, amount=payment.amount + 1))
    assert mismatch.status_code == 422
    assert ProviderNotification.objects.get(event="charge").outcome == "rejected"

    # When the reconciler asks the provider
    pass_run_once()

    # Then the attempt fails as an orphan, its real capture refunded; the order stays UNPAID
    assert_orphan_refunded(payment, why="captured-another-amount", amount=payment.amount + 1)
    assert Order.objects.get(pk=order.pk).status == "UNPAID"
    assert ProviderNotification.objects.get(event="charge").resolved_at is not None
    assert_books_balance(user, wallet)


# --- A notification alone never moves money back -----------------------------------


def test_a_success_notification_the_provider_does_not_confirm_refunds_nothing(
    pay, fault, order, user, wallet, due_at_once
):
    # Given a declined attempt, and a (signed) notification claiming it succeeded
    fault("decline")
    assert pay().status_code == 402
    payment = Payment.objects.get()
    assert notify(body_for(payment)).status_code == 200
    claim = ProviderNotification.objects.get(trade_status="SUCCESS")
    assert claim.outcome == "deferred"

    # When the reconciler asks the provider, which says DECLINED
    pass_run_once()

    # Then nothing moved: no roll forward, no orphan, no refund; the matter is resolved
    assert Payment.objects.get(pk=payment.pk).status == "FAILED"
    assert not Refund.objects.exists()
    claim.refresh_from_db()
    assert claim.resolution.startswith("provider says DECLINED")
    assert wallet(user)["refunded_total"] == 0
    assert_books_balance(user, wallet)
