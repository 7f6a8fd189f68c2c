"""One bad row never stops a pass, and what the shop cannot settle goes to the desk.

Each batch job meets a poisoned item — a real fault in the database: a trigger
that refuses the item's write (as a constraint or a broken migration would), or
a row whose data makes the handler raise — and settles every other item of the
pass. The item's failures are counted (committed although its own transaction
rolled back), it backs off, and after CASE_AFTER_FAILURES it is a case; resolving
the case clears the audit. A forged notification (validly signed, for a
reference the shop never used) is a case dismissed in one click with a reason.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from datetime import timedelta
from functools import partial

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from callbacks.models import ProviderNotification
from operations.audit.checks import captures as capture_checks
from operations.audit.run import audit_run
from operations.statements.importing import statement_download, statement_import_row
from operations.statements.jobs import leftovers_run_once
from operations.statements.models import (
    DiscrepancyKind,
    LineOutcome,
    StatementDiscrepancy,
    StatementLine,
)
from operations.statements.settling import statement_match
from payments.models import LedgerEntry, Payment, Refund
from reconcile.desk.actions import ALREADY_RESOLVED, CaseActionRefused, case_act
from reconcile.desk.models import Case, CaseAction, CaseKind, CaseState, ItemFailure
from reconcile.desk.services import cases_run_once, notification_case_open
from reconcile.models import StrayCapture
from reconcile.recovery import fulfilment
from reconcile.recovery import notifications as notification_jobs
from reconcile.recovery import unsettled_payments as payment_jobs
from reconcile.recovery import unsettled_refunds as refund_jobs
from tests.callbacks.test_api import notify
from tests.factories import UserFactory, desk_operator
from tests.operations.statements.helpers import stray_charge, today

pytestmark = pytest.mark.django_db(transaction=True)


def settling_refused(poison: Callable[..., None], payment: Payment) -> None:
    """The payment's row refuses any change of its status (the settlement's write)."""
    poison("payments_payment", f"NEW.id = {payment.pk} AND NEW.status <> OLD.status")


# --- One bad row never stops a pass ------------------------------------------------------


def test_a_payments_pass_with_one_poisoned_attempt_settles_all_the_others(
    user, unknown_payment, poison, sandbox, due_at_once
):
    # Given three unknown attempts the provider charged, one of which cannot be written
    payments = [unknown_payment(user, charged=True) for _ in range(3)]
    settling_refused(poison, payments[1])

    counts = payment_jobs.run_once()

    # Then the other two are settled, the poisoned one counted and backing off
    assert (counts.rolled_forward, counts.error) == (2, 1)
    statuses = [Payment.objects.get(pk=p.pk).status for p in payments]
    assert statuses == ["SUCCEEDED", "UNKNOWN", "SUCCEEDED"]
    failure = ItemFailure.objects.get()
    assert (failure.job, failure.key, failure.failures) == ("payments", str(payments[1].pk), 1)
    assert failure.reference == payments[1].out_trade_no
    assert "poisoned row" in failure.last_error
    backing_off_until = Payment.objects.get(pk=payments[1].pk).next_reconcile_at
    assert backing_off_until is not None
    assert backing_off_until > timezone.now()
    assert not Case.objects.exists()  # one failure is not yet a case


def test_a_refunds_pass_with_one_orphan_that_cannot_start_its_refund_refunds_the_others(
    user, unknown_payment, sandbox, due_at_once
):
    # Given two orphaned captures; one has lost its capture entry (its data makes
    # orphan_refund_start raise), the other is booked as the reconciler books one
    bad, good = (unknown_payment(user, charged=True) for _ in range(2))
    Payment.objects.filter(pk__in=[bad.pk, good.pk]).update(status="ORPHANED")
    charged = payment_jobs.get_provider().query(out_trade_no=good.out_trade_no)
    assert charged is not None
    assert charged.trade_no is not None
    LedgerEntry.objects.create(
        kind=LedgerEntry.Kind.ORPHAN_CAPTURE,
        order_id=good.order_id,
        payment=good,
        trade_no=charged.trade_no,
        amount=good.amount,
        currency=good.currency,
    )

    counts = refund_jobs.run_once()

    # Then the good one's refund was started and carried out; the bad one counted
    assert (counts.restarted, counts.refunded, counts.error) == (1, 1, 1)
    assert Refund.objects.get().payment_id == good.pk
    assert ItemFailure.objects.get().key == str(bad.pk)


def test_a_notifications_pass_with_one_poisoned_notification_resolves_the_others(
    user, unknown_payment, poison, sandbox, due_at_once
):
    # Given two deferred notifications of charges the provider made
    payments = [unknown_payment(user, charged=True) for _ in range(2)]
    notifications = []
    for n, payment in enumerate(payments):
        account = payment_jobs.get_provider().query(out_trade_no=payment.out_trade_no)
        assert account is not None
        assert account.trade_no is not None
        notifications.append(
            ProviderNotification.objects.create(
                notify_id=f"N-deferred-{n}",
                trade_no=account.trade_no,
                out_trade_no=payment.out_trade_no,
                trade_status="SUCCESS",
                amount=payment.amount,
                currency=payment.currency,
                outcome=ProviderNotification.Outcome.DEFERRED,
                payment=payment,
                response_status=200,
                response_body={},
            )
        )
    settling_refused(poison, payments[0])

    counts = notification_jobs.run_once()

    assert (counts.resolved, counts.failed) == (1, 1)
    assert ProviderNotification.objects.get(pk=notifications[1].pk).resolved_at is not None
    assert ProviderNotification.objects.get(pk=notifications[0].pk).resolved_at is None
    assert ItemFailure.objects.get().job == "notifications"
    # And the next pass leaves it alone while it backs off
    assert notification_jobs.run_once().examined == 0


def test_a_statement_line_that_raises_stays_pending_and_every_other_line_settles(
    user, poison, sandbox, due_at_once
):
    # Given a day with two captures for references the shop never wrote (both strays)
    stray_charge(user, amount=701)
    stray_charge(user, amount=702)
    statement = statement_import_row(day=today())
    statement_download(statement=statement, provider=payment_jobs.get_provider())
    first = StatementLine.objects.get(amount=701)
    # ... and the first one cannot be booked as a stray (its row is refused)
    poison("reconcile_straycapture", "NEW.amount = 701", event="INSERT")

    # When the leftovers job runs, twice
    counts = leftovers_run_once()
    again = leftovers_run_once()

    # Then the other line was settled (its stray refunded); the poisoned one waits,
    # counted once (it backs off), and no run crashed
    assert StatementLine.objects.get(amount=702).outcome == LineOutcome.STRAY
    assert StatementLine.objects.get(pk=first.pk).outcome == LineOutcome.PENDING
    assert (counts.failed, again.failed) == (1, 1)
    assert ItemFailure.objects.get().failures == 1


# --- After CASE_AFTER_FAILURES, a case; resolving it clears the audit -------------------


def test_a_payment_that_fails_n_times_is_a_case_and_its_retry_clears_the_audit(
    user, unknown_payment, poison, sandbox, settings, due_at_once
):
    settings.CASE_AFTER_FAILURES = 3
    settings.RECONCILE_BACKOFF_BASE_S = 0  # due again at once, so three passes are three tries
    # (not charged: its settlement is a fence and FAILED, which the poison refuses)
    payment = unknown_payment(user, charged=False)
    settling_refused(poison, payment)

    for _ in range(3):
        payment_jobs.run_once()

    # Then it is one case, naming the attempt and the error
    case = Case.objects.get()
    assert (case.kind, case.subject_type, case.subject_id) == ("item-failed", "payment", payment.pk)
    assert case.reference == payment.out_trade_no
    assert "failed 3 times" in case.summary
    # And the audit holds its finding for a person, not as a fault
    report = audit_run()
    assert capture_checks.PAYMENT_SETTLED in {f.invariant for f in report.waiting}
    assert (report.findings, report.open_cases) == ([], 1)
    assert _audit() == (1, "audit: 1 waiting for a person")

    # When the data is fixed and a person asks for a retry
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER test_poison_0 ON payments_payment")
    staff = desk_operator()
    assert case_act(case_id=case.pk, action="retry", note="trigger removed", user=staff).acted
    payment_jobs.run_once()

    # Then the machine settled it, closed the case, and the audit is clean
    assert Payment.objects.get(pk=payment.pk).status == "FAILED"
    assert Case.objects.get().state == CaseState.RESOLVED
    assert not ItemFailure.objects.exists()
    assert _audit()[0] == 0


def _audit() -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("audit", stdout=out)
    except SystemExit as exit_:
        return int(exit_.code or 0), out.getvalue().strip().splitlines()[-1]
    return 0, out.getvalue().strip().splitlines()[-1]


# --- A forged notification is a case, dismissed in one click ---------------------------


def forged_notification() -> ProviderNotification:
    """Validly signed (the demo's secret is public), for a reference never used."""
    answer = notify(
        {
            "notify_id": "N-forged-1",
            "trade_no": "T-forged-1",
            "out_trade_no": "P-NEVER-OURS-1",
            "trade_status": "SUCCESS",
            "amount": 999,
            "currency": "CNY",
            "paid_at": timezone.now().isoformat(),
        }
    )
    assert answer.status_code == 422  # stored, and answered: no attempt of ours
    notification = ProviderNotification.objects.get()
    assert notification.outcome == "unmatched"
    return notification


def test_a_forged_notification_is_a_case_dismissed_in_one_click(sandbox, due_at_once, caplog):
    notification = forged_notification()

    # When the reconciler asks the provider about it: the provider knows no such charge
    assert leftovers_run_once().cases_opened == 1
    case = Case.objects.get()
    assert (case.kind, case.subject_id, case.reference) == (
        CaseKind.UNKNOWN_NOTIFICATION,
        notification.pk,
        "P-NEVER-OURS-1",
    )
    # Then it is not asked about again (no ERROR line every pass), and waits for a person
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert leftovers_run_once().cases_opened == 0
        cases_run_once()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert Case.objects.count() == 1
    assert _audit() == (1, "audit: 1 waiting for a person")
    listed = io.StringIO()
    call_command("cases", stdout=listed)
    assert listed.getvalue().split("\t")[:3] == [
        str(case.pk),
        "unknown-notification",
        "P-NEVER-OURS-1",
    ]

    # When staff dismiss it in the admin, with a reason: one form, one click
    admin = Client()
    admin.force_login(UserFactory.create(is_staff=True, is_superuser=True))
    url = f"/admin/reconcile/case/{case.pk}/change/"
    assert "P-NEVER-OURS-1" in admin.get(url).content.decode()
    answer = admin.post(url, {"action": "dismiss", "note": "forged with the public demo secret"})
    assert answer.status_code == 302

    # Then the case and the notification are resolved, with who and why; the audit is clean
    resolved = Case.objects.get()
    assert resolved.state == CaseState.RESOLVED
    assert resolved.resolved_by is not None
    assert "forged with the public demo secret" in resolved.resolution
    assert ProviderNotification.objects.get().resolved_at is not None
    assert CaseAction.objects.get().action == "dismiss"
    assert _audit() == (0, "audit: clean")
    # And the machine does not reopen it
    leftovers_run_once()
    cases_run_once()
    assert Case.objects.filter(state=CaseState.OPEN).count() == 0


def test_cases_resolve_dismisses_once_and_says_so_the_second_time(sandbox, due_at_once, ops):
    forged_notification()
    leftovers_run_once()
    case = Case.objects.get()
    first, second = io.StringIO(), io.StringIO()

    call_command("cases", "resolve", str(case.pk), "--note", "forged", "--by", "ops", stdout=first)
    call_command("cases", "resolve", str(case.pk), "--note", "again", "--by", "ops", stdout=second)

    assert first.getvalue().strip() == f"case {case.pk} dismissed"
    assert second.getvalue().strip() == f"case {case.pk} is already resolved"
    assert CaseAction.objects.count() == 1
    listed = io.StringIO()
    call_command("cases", stdout=listed)
    assert listed.getvalue() == ""


def test_a_double_click_on_dismiss_acts_once(sandbox, due_at_once, double_click):
    forged_notification()
    leftovers_run_once()
    case = Case.objects.get()
    staff = desk_operator()

    results = double_click(
        partial(case_act, case_id=case.pk, action="dismiss", note="forged", user=staff)
    )

    assert sorted(r.acted for r in results) == [False, True]
    assert CaseAction.objects.count() == 1
    assert Case.objects.get().state == CaseState.RESOLVED


def test_a_payment_unresolved_for_case_after_s_is_a_case_accepted_on_the_providers_word(
    user, unknown_payment, sandbox, settings, due_at_once, ops, one_person_desk
):
    settings.CASE_AFTER_S = 3600
    payment = unknown_payment(user, charged=True)
    Payment.objects.filter(pk=payment.pk).update(
        created_at=timezone.now() - timedelta(hours=2),
        next_reconcile_at=timezone.now() + timedelta(hours=1),
    )

    assert cases_run_once().opened == 1
    assert cases_run_once().opened == 0  # one case per subject, however often it runs
    case = Case.objects.get()
    assert case.kind == CaseKind.UNRESOLVED

    result = case_act(case_id=case.pk, action="accept", note="asked by hand", user=ops)

    assert result.acted
    assert Payment.objects.get(pk=payment.pk).status == "SUCCEEDED"
    assert Case.objects.get().state == CaseState.RESOLVED
    fulfilment.run_once()  # (the sweep ships it: no worker in this test)
    assert _audit() == (0, "audit: clean")


def test_refund_on_a_notification_case_refunds_what_the_provider_confirms_once(
    user, wallet, sandbox, due_at_once, ops, one_person_desk
):
    # Given a notification of a real capture for a reference the shop never wrote,
    # held by a case (the provider did not confirm it when first asked)
    out_trade_no, trade_no = stray_charge(user, amount=640)
    notification = ProviderNotification.objects.create(
        notify_id="N-lost-1",
        trade_no=trade_no,
        out_trade_no=out_trade_no,
        trade_status="SUCCESS",
        amount=640,
        currency="CNY",
        outcome=ProviderNotification.Outcome.UNMATCHED,
        response_status=422,
        response_body={},
    )
    notification_case_open(notification=notification, why="the provider did not answer")
    case = Case.objects.get()

    # When a person refunds it, twice (a double click)
    first = case_act(case_id=case.pk, action="refund", note="our lost record", user=ops)
    second = case_act(case_id=case.pk, action="refund", note="our lost record", user=ops)

    # Then the provider refunded it once, the case and the notification are closed
    assert (first.acted, second.acted) == (True, False)
    assert StrayCapture.objects.get().refund_status == "SUCCEEDED"
    seen = wallet(user)
    assert seen["charged_total"] - seen["refunded_total"] == 0
    assert ProviderNotification.objects.get().resolved_at is not None
    assert CaseAction.objects.count() == 1
    assert _audit() == (0, "audit: clean")


def test_an_action_needs_a_reason_and_must_fit_the_case(sandbox, due_at_once, ops):
    forged_notification()
    leftovers_run_once()
    case = Case.objects.get()

    with pytest.raises(CaseActionRefused):
        case_act(case_id=case.pk, action="dismiss", note="  ", user=ops)
    with pytest.raises(CaseActionRefused):
        case_act(case_id=case.pk, action="accept", note="why not", user=ops)
    assert Case.objects.get().state == CaseState.OPEN
    assert not CaseAction.objects.exists()


def test_a_statement_batch_with_one_line_the_database_refuses_matches_the_others(
    user, unknown_payment, poison, sandbox, settings, due_at_once
):
    settings.CASE_AFTER_FAILURES = 2
    settings.RECONCILE_BACKOFF_BASE_S = 0  # due again at once: two runs, two tries
    # Given a day of three captures the shop booked (the reconciler rolled them forward)
    payments = [unknown_payment(user, charged=True) for _ in range(3)]
    assert payment_jobs.run_once().rolled_forward == 3
    statement = statement_import_row(day=today())
    statement_download(statement=statement, provider=payment_jobs.get_provider())
    lines = list(StatementLine.objects.order_by("pk"))
    assert len(lines) == 3
    # ... and the middle line's row refuses to be settled (so the batch's UPDATE fails)
    poison("reconcile_statementline", f"NEW.id = {lines[1].pk} AND NEW.outcome <> OLD.outcome")

    counts = statement_match(statement=statement, provider=payment_jobs.get_provider())

    # Then the other two lines are matched one by one, the bad one is left pending
    assert (counts.matched, counts.failed, counts.discrepancies) == (2, 1, 0)
    outcomes = [StatementLine.objects.get(pk=line.pk).outcome for line in lines]
    assert outcomes == [LineOutcome.MATCHED, LineOutcome.PENDING, LineOutcome.MATCHED]
    failure = ItemFailure.objects.get()
    assert (failure.job, failure.key, failure.reference) == (
        "statement-lines",
        str(lines[1].pk),
        payments[1].out_trade_no,
    )

    # And the second failure in a row is a case about the line, which the audit waits on
    statement_match(statement=statement, provider=payment_jobs.get_provider())
    case = Case.objects.get()
    assert (case.kind, case.subject_type, case.subject_id) == ("item-failed", "line", lines[1].pk)
    fulfilment.run_once()  # (the sweep ships the paid orders: no worker in this test)
    assert audit_run().open_cases == 1

    # When the row is fixed and the statement is matched again (together, now), the
    # open-cases job closes the case: the line is settled
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER test_poison_0 ON reconcile_statementline")
    assert statement_match(statement=statement, provider=payment_jobs.get_provider()).matched == 1
    assert cases_run_once().closed == 1
    assert Case.objects.get().state == CaseState.RESOLVED
    assert not ItemFailure.objects.exists()
    assert _audit() == (0, "audit: clean")


def test_saving_a_resolved_case_in_the_admin_says_so_never_a_500(sandbox, due_at_once):
    # Given a case a person dismissed in the admin
    forged_notification()
    leftovers_run_once()
    case = Case.objects.get()
    admin = Client(raise_request_exception=False)
    admin.force_login(UserFactory.create(is_staff=True, is_superuser=True))
    url = f"/admin/reconcile/case/{case.pk}/change/"
    form = {"action": "dismiss", "note": "forged"}
    dismissed = admin.post(url, form, follow=True)  # (its messages read, as a browser does)
    assert f"case {case.pk} dismissed" in [str(m) for m in dismissed.context["messages"]]

    # When the same form is sent again (a double click, a second tab), or the resolved
    # case's page is saved as it is
    again = admin.post(url, form, follow=True)
    empty = admin.post(url, {}, follow=True)

    # Then each answer says the case is resolved; nothing is acted on twice
    for answer in (again, empty):
        assert answer.status_code == 200
        said = [str(m) for m in answer.context["messages"]]
        assert said == [f"case {case.pk} is {ALREADY_RESOLVED}"]
    assert CaseAction.objects.count() == 1
    # And the resolved case's page is read-only: no form to save
    page = admin.get(url).content.decode()
    assert 'name="_save"' not in page
    assert 'name="note"' not in page


def _line_left_a_discrepancy(reason: str) -> StatementDiscrepancy:
    """Import today's statement and leave its one line a not-booked discrepancy, as the
    statement leaves it when the provider did not confirm the capture when asked."""
    statement = statement_import_row(day=today())
    statement_download(statement=statement, provider=payment_jobs.get_provider())
    line = StatementLine.objects.get()
    StatementLine.objects.filter(pk=line.pk).update(
        outcome=LineOutcome.DISCREPANCY, note=reason, matched_at=timezone.now()
    )
    return StatementDiscrepancy.objects.create(
        kind=DiscrepancyKind.NOT_BOOKED, day=today(), line=line, reason=reason
    )


def test_accept_on_a_discrepancy_case_books_the_providers_confirmed_capture_once(
    user, unknown_payment, sandbox, due_at_once, double_click, ops, one_person_desk
):
    # Given a capture of ours the statement lists, a discrepancy when it was matched
    # (the provider did not confirm it then), held by a case
    payment = unknown_payment(user, charged=True)
    discrepancy = _line_left_a_discrepancy("the provider did not confirm it when asked")
    assert cases_run_once().opened == 1
    case = Case.objects.get()
    assert case.kind == CaseKind.DISCREPANCY
    page = Client()
    page.force_login(UserFactory.create(is_staff=True, is_superuser=True))
    assert (
        '<option value="accept">'
        in page.get(f"/admin/reconcile/case/{case.pk}/change/").content.decode()
    )
    assert '<option value="accept">accept</option>' in page.get("/books/").content.decode()

    # When a person accepts the provider's word, twice at once (a double click)
    results = double_click(
        partial(case_act, case_id=case.pk, action="accept", note="statement is right", user=ops)
    )

    # Then the capture is booked once by the normal settlement, the case and the
    # discrepancy are resolved, and the action is recorded once
    assert sorted(r.acted for r in results) == [False, True], results
    assert Payment.objects.get(pk=payment.pk).status == "SUCCEEDED"
    assert LedgerEntry.objects.filter(payment=payment).count() == 1
    assert StatementDiscrepancy.objects.get(pk=discrepancy.pk).resolved_at is not None
    assert Case.objects.get().state == CaseState.RESOLVED
    assert list(CaseAction.objects.values_list("action", flat=True)) == ["accept"]
    # And the command says so the third time
    out = io.StringIO()
    call_command("cases", "accept", str(case.pk), "--note", "again", "--by", "ops", stdout=out)
    assert out.getvalue().strip() == f"case {case.pk} is {ALREADY_RESOLVED}"
    fulfilment.run_once()  # (the sweep ships it: no worker in this test)
    assert _audit() == (0, "audit: clean")


def test_refund_on_an_unknown_line_case_refunds_the_stray_capture_once(
    user, wallet, sandbox, due_at_once, double_click, ops, one_person_desk
):
    # Given a capture for a reference the shop never wrote, left a discrepancy by the
    # statement (the provider did not confirm it then), held by a case
    stray_charge(user, amount=650)
    discrepancy = _line_left_a_discrepancy("the provider's query does not confirm this capture")
    assert cases_run_once().opened == 1
    case = Case.objects.get()
    assert case.kind == CaseKind.UNKNOWN_LINE

    # When a person refunds it, twice at once (a double click), and once more by command
    results = double_click(
        partial(case_act, case_id=case.pk, action="refund", note="not ours", user=ops)
    )
    out = io.StringIO()
    call_command("cases", "refund", str(case.pk), "--note", "again", "--by", "ops", stdout=out)

    # Then the stray refund service refunded it once; case and discrepancy are resolved
    assert sorted(r.acted for r in results) == [False, True]
    assert out.getvalue().strip() == f"case {case.pk} is {ALREADY_RESOLVED}"
    assert StrayCapture.objects.get().refund_status == "SUCCEEDED"
    seen = wallet(user)
    assert seen["charged_total"] - seen["refunded_total"] == 0
    assert StatementDiscrepancy.objects.get(pk=discrepancy.pk).resolved_at is not None
    assert list(CaseAction.objects.values_list("action", flat=True)) == ["refund"]
    assert _audit() == (0, "audit: clean")
