"""The daily statement against the ledger (docs/design.md, "Statements"): every kind of
discrepancy planted through the sandbox and the ledger is found, and settled by
asking the provider, or recorded and reported until resolved.

The provider is the real sandbox over HTTP (the live server); its statement is
downloaded, streamed and parsed as in production.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime, time, timedelta

import pytest
from django.core.management import call_command
from django.db.models import Sum
from django.test import Client
from django.utils import timezone

from callbacks.models import ProviderNotification
from demo.sandbox.models import Charge
from demo.sandbox.models import Refund as SandboxRefund
from operations.audit.checks import statements as statement_checks
from operations.statements.discrepancies import discrepancy_resolve
from operations.statements.importing import statement_reconcile
from operations.statements.jobs import leftovers_run_once
from operations.statements.models import (
    DiscrepancyKind,
    LineOutcome,
    StatementDiscrepancy,
    StatementImport,
    StatementLine,
)
from operations.statements.report import OUR_SIDE, PROVIDER_SIDE, statement_report
from orders.models import Order
from payments.models import LedgerEntry, Payment, Refund
from payments.services import payment_create, payment_mark_unknown
from reconcile.models import StrayCapture
from reconcile.recovery import unsettled_refunds as refund_reconciler
from tests.callbacks.test_api import notify
from tests.conftest import new_key
from tests.factories import UserFactory
from tests.operations.statements.helpers import (
    charge_at_provider,
    statement_findings,
    stray_charge,
    today,
    unresolved_notifications,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("due_at_once")]


@pytest.fixture
def staff_user():
    return UserFactory.create(is_staff=True)


def net_debit(wallet, user) -> int:
    seen = wallet(user)
    return seen["charged_total"] - seen["refunded_total"]


def test_a_day_of_paid_and_refunded_orders_matches_line_by_line(pay, refund, order, sandbox):
    # Given an order paid and partly refunded through the API
    assert pay().status_code == 200
    assert refund(body={"amount": 100}).status_code == 200

    counts = statement_reconcile(day=today())

    # Then both lines are matched to their ledger entries, nothing is open
    assert (counts.downloaded, counts.new_lines, counts.matched) == (2, 2, 2)
    lines = StatementLine.objects.order_by("kind")
    assert [line.outcome for line in lines] == [LineOutcome.MATCHED] * 2
    assert {line.ledger_entry_id for line in lines} == set(
        LedgerEntry.objects.values_list("pk", flat=True)
    )
    assert StatementDiscrepancy.objects.count() == 0
    report = statement_report(day=today())
    assert report.closed
    sides = {(row.side, row.kind[:6]): row for row in report.rows}
    assert sides[(PROVIDER_SIDE, "charge")].total == sides[(OUR_SIDE, "charge")].total
    assert sides[(PROVIDER_SIDE, "refund")].matched_total == 100
    assert statement_findings() == []


def test_a_rerun_adds_only_the_lines_it_had_not_seen(pay, client, product, sandbox):
    assert pay().status_code == 200
    statement_reconcile(day=today())

    # The day grows: another order is paid
    second = client.post(
        "/api/v1/orders/",
        {"lines": [{"sku": product.sku, "quantity": 1}]},
        format="json",
        headers={"Idempotency-Key": new_key()},
    ).json()["number"]
    assert pay(number=second).status_code == 200
    again = statement_reconcile(day=today())
    third = statement_reconcile(day=today())

    assert (again.downloaded, again.new_lines, again.matched) == (2, 1, 1)
    assert (third.new_lines, third.matched) == (0, 0)
    assert StatementImport.objects.count() == 1
    assert StatementImport.objects.get().downloads == 3
    assert StatementLine.objects.count() == 2


def test_a_dropped_notification_with_the_shops_record_lost_is_refunded(user, wallet, sandbox):
    # Given a capture at the provider for a reference the shop holds no attempt for,
    # whose notification never came
    out_trade_no, trade_no = stray_charge(user)

    statement_reconcile(day=today())

    # Then it was confirmed by asking and refunded in full, once
    stray = StrayCapture.objects.get()
    assert (stray.out_trade_no, stray.trade_no, stray.refund_status) == (
        out_trade_no,
        trade_no,
        "SUCCEEDED",
    )
    assert StatementLine.objects.get().outcome == LineOutcome.STRAY
    assert net_debit(wallet, user) == 0
    # And the refund, on the statement too now, matches the stray capture's refund
    rerun = statement_reconcile(day=today())
    assert (rerun.new_lines, rerun.stray) == (1, 1)
    assert SandboxRefund.objects.filter(charge__out_trade_no=out_trade_no).count() == 1
    assert statement_findings() == []


def test_an_unmatched_notification_is_resolved_by_the_capture_the_statement_found(
    user, wallet, sandbox
):
    # Given the known gap: a notification for a reference we hold no attempt for
    out_trade_no, trade_no = stray_charge(user, amount=555)
    body = {
        "notify_id": "N-stray-1",
        "trade_no": trade_no,
        "out_trade_no": out_trade_no,
        "trade_status": "SUCCESS",
        "amount": 555,
        "currency": "CNY",
        "paid_at": timezone.now().isoformat(),
    }
    notify(body)
    assert ProviderNotification.objects.get().outcome == "unmatched"
    assert unresolved_notifications() == 1

    # When the reconciler's pass asks the provider about it (before any statement)
    assert leftovers_run_once().strays_found == 1

    # Then the capture is refunded and the notification resolved, saying how
    assert StrayCapture.objects.get().refund_status == "SUCCEEDED"
    resolved = ProviderNotification.objects.get()
    assert resolved.resolved_at is not None
    assert "refunded" in resolved.resolution
    assert net_debit(wallet, user) == 0
    # And the statement finds it already handled: no second refund
    statement_reconcile(day=today())
    assert SandboxRefund.objects.count() == 1
    assert statement_findings() == []


def test_a_capture_of_another_amount_is_an_orphaned_capture_refunded(order, user, wallet, sandbox):
    # Given our attempt left UNKNOWN, and a capture of another amount at the provider
    payment = payment_create(user_id=user.pk, order_number=order.number)
    payment_mark_unknown(payment_id=payment.pk)
    charge_at_provider(payment, amount=payment.amount + 50)

    statement_reconcile(day=today())

    # Then asking the provider booked it as an orphaned capture, and its refund began
    payment.refresh_from_db()
    assert (payment.status, payment.failure_code) == ("ORPHANED", "captured-another-amount")
    assert StatementLine.objects.get().outcome == LineOutcome.MATCHED
    assert Order.objects.get(pk=order.pk).status == "UNPAID"
    refund_reconciler.run_once()
    statement_reconcile(day=today())
    assert [line.outcome for line in StatementLine.objects.all()] == [LineOutcome.MATCHED] * 2
    assert net_debit(wallet, user) == 0
    assert StatementDiscrepancy.objects.count() == 0


def test_a_capture_the_shop_settled_as_failed_is_rolled_forward_by_asking(order, user, sandbox):
    # Given a capture whose answer we lost, and an attempt we then failed by mistake
    payment = payment_create(user_id=user.pk, order_number=order.number)
    charge_at_provider(payment, amount=payment.amount)
    Payment.objects.filter(pk=payment.pk).update(status="FAILED")

    statement_reconcile(day=today())

    # Then the provider's query rolled it forward: the order took the money
    assert Payment.objects.get(pk=payment.pk).status == "SUCCEEDED"
    assert Order.objects.get(pk=order.pk).status == "PAID"
    assert StatementLine.objects.get().outcome == LineOutcome.MATCHED
    assert "rolled_forward" in StatementLine.objects.get().note


def test_a_ledger_entry_the_provider_does_not_know_is_open_until_staff_resolve_it(
    paid_order, staff_user
):
    # Given a ledger entry with no provider line (a booking the provider never made)
    entry = LedgerEntry.objects.get()
    LedgerEntry.objects.filter(pk=entry.pk).update(trade_no="T-NEVER-CHARGED")
    Payment.objects.filter(pk=entry.payment_id).update(trade_no="T-NEVER-CHARGED")

    statement_reconcile(day=today())

    # Then it is an open discrepancy that the audit reports
    found = StatementDiscrepancy.objects.get(kind=DiscrepancyKind.NOT_ON_STATEMENT)
    assert found.ledger_entry_id == entry.pk
    assert found.resolved_at is None
    assert "T-NEVER-CHARGED" in found.reason
    assert statement_checks.DISCREPANCY_RESOLVED in {f.invariant for f in statement_findings()}
    # (the provider's line for the real charge found no entry either: not booked)
    assert StatementDiscrepancy.objects.filter(kind=DiscrepancyKind.NOT_BOOKED).count() == 1

    # When staff resolve them with a note, the audit stops reporting them, and the
    # rows stay, with who, when and why; a rerun does not reopen them
    for discrepancy in StatementDiscrepancy.objects.all():
        assert discrepancy_resolve(
            discrepancy_id=discrepancy.pk, user_id=staff_user.pk, note="test booking"
        )
    statement_reconcile(day=today())
    assert statement_findings() == []
    assert StatementDiscrepancy.objects.filter(resolved_by=staff_user).count() == 2


@pytest.mark.parametrize("differs", ["amount", "currency"])
def test_an_amount_or_currency_that_differs_is_an_open_discrepancy(paid_order, differs):
    # Given our ledger says another amount (or currency) than the provider settled
    booked = {"amount": paid_order.amount + 1, "currency": "CNY"}
    if differs == "currency":
        booked = {"amount": paid_order.amount, "currency": "USD"}
    LedgerEntry.objects.update(**booked)

    counts = statement_reconcile(day=today())

    line = StatementLine.objects.get()
    found = StatementDiscrepancy.objects.get()
    assert counts.discrepancies == 1
    assert (line.outcome, found.kind, found.line_id) == (
        LineOutcome.DISCREPANCY,
        DiscrepancyKind.AMOUNT_DIFFERS,
        line.pk,
    )
    said = (
        f"settled {paid_order.amount} CNY, our ledger says {booked['amount']} {booked['currency']}"
    )
    assert said in found.reason
    assert not statement_report(day=today()).closed
    assert statement_checks.DISCREPANCY_RESOLVED in {f.invariant for f in statement_findings()}
    # A rerun finds the same one, not a second
    statement_reconcile(day=today())
    assert StatementDiscrepancy.objects.count() == 1


def test_a_booking_just_after_midnight_is_resolved_by_the_days_statement(paid_order):
    # Given a ledger entry booked yesterday (by our clock) of a charge the provider
    # lists today
    yesterday = today() - timedelta(days=1)
    late = datetime.combine(yesterday, time(23, 59, 59), tzinfo=UTC)
    LedgerEntry.objects.update(created_at=late)

    statement_reconcile(day=yesterday)
    assert StatementDiscrepancy.objects.get().kind == DiscrepancyKind.NOT_ON_STATEMENT

    counts = statement_reconcile(day=today())

    assert counts.resolved == 1
    resolved = StatementDiscrepancy.objects.get()
    assert resolved.resolved_at is not None
    assert f"listed by the statement of {today()}" in resolved.resolution
    assert statement_findings() == []


def test_an_empty_day_imports_nothing_and_closes(sandbox):
    counts = statement_reconcile(day=today() - timedelta(days=3))
    assert (counts.downloaded, counts.new_lines) == (0, 0)
    assert StatementImport.objects.get().error == ""
    assert statement_report(day=today() - timedelta(days=3)).closed


def test_a_day_with_only_refunds(paid_order, refund):
    # Given a charge of yesterday refunded today
    yesterday = timezone.now() - timedelta(days=1)
    Charge.objects.update(paid_at=yesterday)
    LedgerEntry.objects.update(created_at=yesterday)
    assert refund(body={"amount": 300}).status_code == 200

    counts = statement_reconcile(day=today())

    assert (counts.downloaded, counts.matched) == (1, 1)
    line = StatementLine.objects.get()
    assert (line.kind, line.amount, line.outcome) == ("refund", 300, LineOutcome.MATCHED)
    assert line.reference == Refund.objects.get().refund_no
    refunded = LedgerEntry.objects.filter(kind="refund").aggregate(total=Sum("amount"))
    assert refunded["total"] == 300


def test_the_books_page_and_the_report_command_show_the_day(paid_order, staff_user):
    LedgerEntry.objects.update(amount=paid_order.amount + 1)
    statement_reconcile(day=today())
    web = Client()
    web.force_login(staff_user)

    page = web.get("/books/").content.decode()
    live = web.get("/books/live/").json()["fragments"]["books-statements"]
    out = io.StringIO()
    call_command("reconcile_statement", "--date", str(today()), "--report", stdout=out)

    for shown in (page, live):
        assert f"{today():%Y-%m-%d}: <strong>not closed</strong>" in shown
        assert "amount-differs" in shown
        assert "Open discrepancies (1)" in shown
    report = out.getvalue()
    assert f"statement {today()}: 1 lines, 1 download(s)" in report
    assert "provider charge" in report
    assert "open discrepancies of the day: 1" in report
    assert report.rstrip().endswith("NOT closed")
    assert StatementImport.objects.get().downloads == 1  # --report only reads


def test_staff_resolve_a_discrepancy_in_the_admin_with_a_note_never_a_delete(
    paid_order, staff_user
):
    LedgerEntry.objects.update(amount=paid_order.amount + 1)
    statement_reconcile(day=today())
    found = StatementDiscrepancy.objects.get()
    admin = Client()
    admin.force_login(UserFactory.create(is_staff=True, is_superuser=True))
    url = f"/admin/statements/statementdiscrepancy/{found.pk}/change/"

    # A resolution needs a note
    assert admin.post(url, {"resolution": ""}).status_code == 200
    assert StatementDiscrepancy.objects.get().resolved_at is None
    # With one it is recorded, with who and when; a delete is not offered
    assert admin.post(url, {"resolution": "ledger corrected by hand"}).status_code == 302
    resolved = StatementDiscrepancy.objects.get()
    assert resolved.resolution == "ledger corrected by hand"
    assert resolved.resolved_at is not None
    assert resolved.resolved_by is not None
    assert (
        admin.post(f"/admin/statements/statementdiscrepancy/{found.pk}/delete/").status_code == 403
    )
    assert StatementDiscrepancy.objects.count() == 1
    assert statement_findings() == []
