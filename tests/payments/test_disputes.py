"""Disputes (payments/disputes.py), against the real sandbox.

The sandbox's ``dispute_lost`` fault plays a charge disputed by the payer's bank
after it succeeded, and lost: the provider withdraws the money from the shop
and gives it back to the payer, notifies, and later closes the dispute LOST and
notifies again (Celery tasks run by a real worker). The shop books one
``Dispute`` row and one ledger entry per movement, keeps a case open while the
dispute is, leaves the order PAID, and refunds it no more.
"""

from __future__ import annotations

import pytest

from callbacks.models import ProviderNotification
from demo.sandbox.models import Dispute as ProviderDispute
from operations.audit.run import audit_run
from operations.statements.importing import statement_reconcile
from operations.statements.models import LineKind, LineOutcome, StatementLine
from operations.statements.passes import pass_run_once
from orders.models import Order
from payments.models import Dispute, LedgerEntry
from reconcile.desk.models import Case, CaseKind, CaseState
from tests.payments.test_reversals import books_net

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.usefixtures("worker"),
]

DISPUTE_S = 1.0


def test_a_dispute_opened_and_lost_is_booked_once_with_a_case_while_open(
    order, pay, refund, fault, user, wallet, worker, settings
):
    settings.RECONCILE_AFTER_S = 0
    # Given a paid order whose charge the payer's bank will dispute
    fault("dispute_lost", delay_s=DISPUTE_S)
    assert pay().status_code == 200

    # When the provider opens the dispute and notifies it
    worker.wait_for(
        lambda: ProviderNotification.objects.filter(event="dispute", trade_status="OPEN").exists(),
        timeout=DISPUTE_S * 5 + 30,
        what="the dispute's opening notification",
    )

    # Then it is booked at once: the row, the money withdrawn, the order untouched
    dispute = Dispute.objects.get()
    assert (dispute.status, dispute.withdrawn, dispute.amount) == (
        "OPEN",
        order.amount,
        order.amount,
    )
    [withdrawal] = LedgerEntry.objects.filter(kind="dispute_withdrawal")
    assert (withdrawal.dispute_id, withdrawal.amount) == (dispute.pk, order.amount)
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    # ... a person is told while it is open, and the money is not refundable meanwhile
    pass_run_once()
    [case] = Case.objects.filter(kind=CaseKind.DISPUTE)
    assert (case.subject_type, case.subject_id, case.state) == ("dispute", dispute.pk, "open")
    refused = refund()
    assert (refused.status_code, refused.json()["code"]) == (409, "order-not-refundable")
    assert audit_run().findings == []

    # When the dispute is lost
    worker.wait_for(
        lambda: ProviderNotification.objects.filter(event="dispute", trade_status="LOST").exists(),
        timeout=DISPUTE_S * 5 + 30,
        what="the dispute's closing notification",
    )
    pass_run_once()

    # Then it is closed in the books, once; the case closed by the machine
    dispute.refresh_from_db()
    assert (dispute.status, dispute.withdrawn, dispute.reinstated) == ("LOST", order.amount, 0)
    assert LedgerEntry.objects.filter(dispute=dispute).count() == 1
    case.refresh_from_db()
    assert case.state == CaseState.RESOLVED
    # The payer got the money back through the dispute: the provider and the books agree
    account = wallet(user)
    assert account["disputed_total"] == order.amount
    assert account["charged_total"] - account["refunded_total"] - account["disputed_total"] == (
        books_net(user)
    )
    assert books_net(user) == 0
    [provider_dispute] = ProviderDispute.objects.all()
    assert provider_dispute.dispute_id == dispute.dispute_id
    # A lost dispute leaves the order PAID: the capture stays, refunded_amount untouched
    assert Order.objects.get(pk=order.pk).refunded_amount == 0
    report = audit_run()
    assert report.ok, [finding.message for finding in report.findings]

    # And the statement lists the withdrawal, matched to its entry
    statement_reconcile(day=dispute.opened_at.date())
    line = StatementLine.objects.get(kind=LineKind.DISPUTE_WITHDRAWAL)
    assert (line.outcome, line.provider_id, line.ledger_entry_id) == (
        LineOutcome.MATCHED,
        dispute.dispute_id,
        withdrawal.pk,
    )
    report = audit_run()
    assert report.ok, [finding.message for finding in report.findings]


def test_a_dispute_nobody_notified_is_booked_from_the_statement(
    order, pay, fault, user, wallet, worker, settings
):
    # Given a charge disputed and lost whose notifications are all dropped
    settings.RECONCILE_AFTER_S = 0
    fault("dispute_lost", delay_s=DISPUTE_S)
    fault("callback_drop")
    assert pay().status_code == 200
    provider_dispute = worker.wait_for(
        lambda: ProviderDispute.objects.filter(status="LOST").first(),
        timeout=DISPUTE_S * 10 + 30,
        what="the dispute opened and lost",
    )
    assert not ProviderNotification.objects.filter(event="dispute").exists()
    assert not Dispute.objects.exists()

    # When the day's statement is imported: its dispute_withdrawal line has no entry
    counts = statement_reconcile(day=provider_dispute.opened_at.date())

    # Then asking the provider about the dispute booked it, and the line matched
    assert counts.asked == 1
    dispute = Dispute.objects.get()
    assert (dispute.dispute_id, dispute.status, dispute.withdrawn) == (
        provider_dispute.dispute_id,
        "LOST",
        order.amount,
    )
    line = StatementLine.objects.get(kind=LineKind.DISPUTE_WITHDRAWAL)
    assert line.outcome == LineOutcome.MATCHED
    assert set(StatementLine.objects.values_list("outcome", flat=True)) == {LineOutcome.MATCHED}
    # Closed already: no case was ever needed
    pass_run_once()
    assert not Case.objects.filter(kind=CaseKind.DISPUTE).exists()
    report = audit_run()
    assert report.ok, [finding.message for finding in report.findings]
