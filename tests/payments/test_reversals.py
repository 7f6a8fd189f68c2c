"""Refunds that fail after succeeding (payments/reversals.py), against the real sandbox.

The sandbox's ``refund_reversal`` fault plays a refund the provider answers
SUCCESS now and reverses later (a closed card): its reversal and its
notification are Celery tasks run by a real worker. The shop books the
reversal once, from the provider's own account (a notification is only the
reason to ask), puts the order back to PAID, and opens one case for a person:
the customer still awaits the money.
"""

from __future__ import annotations

import pytest

from callbacks.models import ProviderNotification
from demo.sandbox.models import Refund as ProviderRefund
from operations.audit.run import audit_run
from operations.statements.importing import statement_reconcile
from operations.statements.models import LineKind, LineOutcome, StatementLine
from operations.statements.passes import pass_run_once
from orders.models import Order
from payments.models import MONEY_IN_KINDS, LedgerEntry, Refund
from reconcile.desk.models import Case, CaseKind, CaseState
from tests.reconcile.test_declined_auto_refunds import run_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.usefixtures("worker"),
]

REVERSAL_S = 1.0


def books_net(user) -> int:
    """What our ledger says the payer is debited: money in (captures, reversals,
    reinstatements) less money out (refunds, disputes' withdrawals)."""
    signed = 0
    for kind, amount in LedgerEntry.objects.filter(payment__payer=user.username).values_list(
        "kind", "amount"
    ):
        signed += amount if kind in MONEY_IN_KINDS else -amount
    return signed


def _reversed_at_the_provider(refund_no: str, worker) -> ProviderRefund:
    return worker.wait_for(
        lambda: ProviderRefund.objects.filter(out_refund_no=refund_no, status="REVERSED").first(),
        timeout=REVERSAL_S * 5 + 30,
        what="the sandbox reversing the refund",
    )


def test_a_refund_that_fails_after_succeeding_is_reversed_once_and_a_case_tells_a_person(
    paid_order, refund, fault, user, wallet, worker, settings
):
    settings.RECONCILE_AFTER_S = 0
    # Given a full refund the provider answers SUCCESS now and reverses later
    fault("refund_reversal", delay_s=REVERSAL_S)
    assert refund().status_code == 200
    attempt = Refund.objects.get()
    assert Order.objects.get(pk=paid_order.pk).status == Order.Status.REFUNDED

    # When the provider reverses it and notifies: the notification alone books nothing
    _reversed_at_the_provider(attempt.refund_no, worker)
    notification = worker.wait_for(
        lambda: ProviderNotification.objects.filter(
            out_refund_no=attempt.refund_no, trade_status="REVERSED"
        ).first(),
        timeout=30,
        what="the reversal's notification",
    )
    assert notification.outcome == ProviderNotification.Outcome.DEFERRED
    assert Refund.objects.get(pk=attempt.pk).status == "SUCCEEDED"

    # ... the reconciler asks the provider, once, and books what it says
    pass_run_once()

    attempt.refresh_from_db()
    order = Order.objects.get(pk=paid_order.pk)
    assert attempt.status == "REVERSED"
    assert (order.status, order.refunded_amount) == (Order.Status.PAID, 0)
    [reversal] = LedgerEntry.objects.filter(kind="refund_reversal")
    [booked] = LedgerEntry.objects.filter(kind="refund")
    assert (reversal.refund_attempt_id, reversal.refund_id, reversal.amount) == (
        attempt.pk,
        booked.refund_id,
        paid_order.amount,
    )
    notification.refresh_from_db()
    assert notification.resolved_at is not None
    assert "REVERSED" in notification.resolution
    # The money is back with the shop, the payer's credit taken back: the books agree
    account = wallet(user)
    assert account["refunded_total"] == 0
    assert account["charged_total"] - account["refunded_total"] == books_net(user)
    # A person is told, once: however many passes follow, one case, nothing re-asked
    [case] = Case.objects.filter(kind=CaseKind.REFUND_REVERSED)
    assert (case.subject_type, case.subject_id, case.state) == ("refund", attempt.pk, "open")
    assert "awaits" in case.summary
    pass_run_once()
    pass_run_once()
    assert Case.objects.filter(kind=CaseKind.REFUND_REVERSED).count() == 1
    assert LedgerEntry.objects.filter(kind="refund_reversal").count() == 1
    report = audit_run()
    assert report.ok, [finding.message for finding in report.findings]

    # When the shop refunds the order again (the customer gave another card), the case
    # closes by itself
    assert refund().status_code == 200
    pass_run_once()
    case.refresh_from_db()
    assert case.state == CaseState.RESOLVED
    assert Order.objects.get(pk=paid_order.pk).status == Order.Status.REFUNDED
    report = audit_run()
    assert report.ok, [finding.message for finding in report.findings]


def test_a_partial_refund_reversed_leaves_the_order_paid_with_less_refunded(
    paid_order, refund, fault, user, wallet, worker, settings
):
    settings.RECONCILE_AFTER_S = 0
    assert refund(body={"amount": 500}).status_code == 200
    fault("refund_reversal", delay_s=REVERSAL_S)
    assert refund(body={"amount": 700}).status_code == 200
    reversed_ = Refund.objects.get(amount=700)

    _reversed_at_the_provider(reversed_.refund_no, worker)
    run_until(
        lambda: Refund.objects.get(pk=reversed_.pk).status == "REVERSED",
        step=pass_run_once,
        timeout_s=30,
    )

    order = Order.objects.get(pk=paid_order.pk)
    assert (order.status, order.refunded_amount) == (Order.Status.PAID, 500)
    assert wallet(user)["refunded_total"] == 500
    report = audit_run()
    assert report.ok, [finding.message for finding in report.findings]


def test_a_reversal_nobody_notified_is_found_by_the_statement(
    paid_order, refund, fault, user, wallet, worker, settings
):
    # Given a refund reversed later, whose notifications are all dropped
    settings.RECONCILE_AFTER_S = 0
    fault("refund_reversal", delay_s=REVERSAL_S)
    fault("callback_drop", target="refund")
    assert refund().status_code == 200
    attempt = Refund.objects.get()
    _reversed_at_the_provider(attempt.refund_no, worker)
    assert not ProviderNotification.objects.filter(out_refund_no=attempt.refund_no).exists()

    # When the day's statement is imported: its refund_failure line has no entry yet
    counts = statement_reconcile(day=attempt.created_at.date())

    # Then asking the provider booked the reversal, and every line is matched
    assert counts.asked == 1
    attempt.refresh_from_db()
    assert attempt.status == "REVERSED"
    failure = StatementLine.objects.get(kind=LineKind.REFUND_FAILURE)
    assert (failure.outcome, failure.provider_id) == (LineOutcome.MATCHED, attempt.refund_id)
    assert failure.ledger_entry is not None
    assert failure.ledger_entry.kind == "refund_reversal"
    assert set(StatementLine.objects.values_list("outcome", flat=True)) == {LineOutcome.MATCHED}
    assert Order.objects.get(pk=paid_order.pk).status == Order.Status.PAID
    pass_run_once()  # the case for a person
    assert Case.objects.filter(kind=CaseKind.REFUND_REVERSED, subject_id=attempt.pk).exists()
    report = audit_run()
    assert report.ok, [finding.message for finding in report.findings]
