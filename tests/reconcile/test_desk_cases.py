"""A failed item's case follows its item, whichever path settles it, and its job alone.

- A failed item's case (and its count) closes when the item settles by any path,
  not only when its own job runs it again: the open-cases job reads each job's
  items still to settle off the books.
- Two jobs failing on one subject (the payments and the orphan-refunds job on a
  payment) count and hold it apart: one clearing its item leaves the other's case.
- Dismissing a failed item's case dismisses the failure, not the item.
- A double click on retry acts once.
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import pytest
from django.db import connection
from django.utils import timezone

from callbacks.models import ProviderNotification
from payments.models import Payment
from reconcile.desk.actions import case_act
from reconcile.desk.isolation import NOTIFICATIONS, ORPHAN_REFUNDS, PAYMENTS, FailureIsolation
from reconcile.desk.models import Case, CaseAction, CaseKind, CaseState, ItemFailure
from reconcile.desk.services import cases_run_once
from reconcile.recovery import unsettled_payments as payment_jobs
from tests.callbacks.test_api import body_for, notify
from tests.factories import desk_operator
from tests.reconcile.test_desk import settling_refused

pytestmark = pytest.mark.django_db(transaction=True)


class Poisoned(RuntimeError):
    """What a poisoned item raises (its data makes the handler fail)."""


def _fails() -> None:
    raise Poisoned("this item's data makes its handler raise")


def test_a_failed_payments_case_closes_when_a_callback_settles_the_payment(
    user,
    unknown_payment,
    poison,
    sandbox,
    settings,
    due_at_once,
):
    # Given a charged attempt the payments job failed on twice: a case
    settings.CASE_AFTER_FAILURES = 2
    settings.RECONCILE_BACKOFF_BASE_S = 0
    payment = unknown_payment(user, charged=True)
    settling_refused(poison, payment)
    for _ in range(2):
        payment_jobs.run_once()
    case = Case.objects.get()
    assert (case.kind, case.job, case.state) == (CaseKind.ITEM_FAILED, PAYMENTS, CaseState.OPEN)

    # When the data is fixed and the provider's callback settles it (the reconciler
    # never claims it again: it is settled)
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER test_poison_0 ON payments_payment")
    account = payment_jobs.get_provider().query(out_trade_no=payment.out_trade_no)
    assert account is not None
    assert notify(body_for(payment, trade_no=account.trade_no)).status_code == 200
    assert Payment.objects.get(pk=payment.pk).status == "SUCCEEDED"

    # Then the open-cases job closes its case and clears its count
    assert cases_run_once().closed == 1
    case.refresh_from_db()
    assert case.state == CaseState.RESOLVED
    assert "settled by the machine" in case.resolution
    assert not ItemFailure.objects.exists()


def test_a_failed_notifications_case_closes_when_another_path_resolves_the_notification(
    user, unknown_payment, sandbox, settings
):
    # Given a notification the notifications job failed on: a case
    settings.CASE_AFTER_FAILURES = 1
    notification = _deferred_notification(unknown_payment(user, charged=True))
    isolation = FailureIsolation(job=NOTIFICATIONS, subject_type="notification")
    isolation.run(key=notification.pk, reference=notification.notify_id, work=_fails, failed=None)
    assert Case.objects.filter(state=CaseState.OPEN).count() == 1
    # And another job (here: unrelated to the one that failed) resolves it
    ProviderNotification.objects.filter(pk=notification.pk).update(
        resolved_at=notification.received_at, resolution="matched by the statement"
    )

    assert cases_run_once().closed == 1
    assert not Case.objects.filter(state=CaseState.OPEN).exists()
    assert not ItemFailure.objects.exists()


def test_an_unsettled_failed_item_keeps_its_case_through_the_open_cases_job(
    user, unknown_payment, sandbox, settings
):
    settings.CASE_AFTER_FAILURES = 1
    payment = unknown_payment(user, charged=False)
    isolation = FailureIsolation(job=PAYMENTS, subject_type="payment")
    isolation.run(key=payment.pk, reference=payment.out_trade_no, work=_fails, failed=None)

    assert cases_run_once().closed == 0
    assert Case.objects.get().state == CaseState.OPEN
    assert ItemFailure.objects.get().failures == 1


def test_two_jobs_failing_on_one_payment_hold_it_apart(user, unknown_payment, sandbox, settings):
    # Given the payments job and the orphan-refunds job both failing on one payment
    settings.CASE_AFTER_FAILURES = 1
    payment = unknown_payment(user, charged=False)
    payments = FailureIsolation(job=PAYMENTS, subject_type="payment")
    orphans = FailureIsolation(job=ORPHAN_REFUNDS, subject_type="payment")
    for isolation in (payments, orphans):
        isolation.run(key=payment.pk, reference=payment.out_trade_no, work=_fails, failed=None)

    # Then each job has its own case
    assert sorted(Case.objects.filter(state=CaseState.OPEN).values_list("job", flat=True)) == [
        ORPHAN_REFUNDS,
        PAYMENTS,
    ]

    # When the payments job clears its item
    payments.run(key=payment.pk, reference=payment.out_trade_no, work=lambda: 1, failed=None)

    # Then the orphan-refunds job's case and count stay, the payments job's are gone
    assert list(Case.objects.filter(state=CaseState.OPEN).values_list("job", flat=True)) == [
        ORPHAN_REFUNDS
    ]
    assert list(ItemFailure.objects.values_list("job", flat=True)) == [ORPHAN_REFUNDS]
    # And its next failure is a warning on the case it has, not a second case
    orphans.run(key=payment.pk, reference=payment.out_trade_no, work=_fails, failed=None)
    assert Case.objects.filter(state=CaseState.OPEN).count() == 1


def test_dismissing_a_failed_notification_about_our_attempt_leaves_it_unresolved(
    user, unknown_payment, sandbox, settings
):
    settings.CASE_AFTER_FAILURES = 1
    notification = _deferred_notification(unknown_payment(user, charged=True))
    isolation = FailureIsolation(job=NOTIFICATIONS, subject_type="notification")
    isolation.run(key=notification.pk, reference=notification.notify_id, work=_fails, failed=None)
    case = Case.objects.get()
    staff = desk_operator()

    assert case_act(case_id=case.pk, action="dismiss", note="looked at it", user=staff).acted

    # The failure is dismissed (its count starts afresh), the notification is not:
    # its attempt is not settled, and the audit says so
    assert Case.objects.get().state == CaseState.RESOLVED
    assert not ItemFailure.objects.exists()
    assert ProviderNotification.objects.get(pk=notification.pk).resolved_at is None


def test_a_double_click_on_retry_acts_once(user, unknown_payment, sandbox, settings, double_click):
    settings.CASE_AFTER_FAILURES = 1
    payment = unknown_payment(user, charged=False)
    isolation = FailureIsolation(job=PAYMENTS, subject_type="payment")
    isolation.run(key=payment.pk, reference=payment.out_trade_no, work=_fails, failed=None)
    Payment.objects.filter(pk=payment.pk).update(
        next_reconcile_at=ItemFailure.objects.get().next_try_at
    )
    case = Case.objects.get()
    staff = desk_operator()

    results = double_click(
        partial(case_act, case_id=case.pk, action="retry", note="fixed", user=staff)
    )

    assert sorted(r.acted for r in results) == [False, True]
    assert CaseAction.objects.filter(action="retry").count() == 1
    assert Payment.objects.get(pk=payment.pk).next_reconcile_at is None


def _deferred_notification(payment: Payment) -> ProviderNotification:
    account = payment_jobs.get_provider().query(out_trade_no=payment.out_trade_no)
    assert account is not None
    return ProviderNotification.objects.create(
        notify_id=f"N-deferred-{payment.pk}",
        trade_no=account.trade_no or "",
        out_trade_no=payment.out_trade_no,
        trade_status="SUCCESS",
        amount=payment.amount,
        currency=payment.currency,
        outcome=ProviderNotification.Outcome.DEFERRED,
        payment=payment,
        response_status=200,
        response_body={},
    )


def test_an_open_cases_pass_with_one_subject_whose_case_is_refused_opens_the_others(
    user, unknown_payment, poison, sandbox, settings, ops
):
    # Given three attempts unresolved for longer than CASE_AFTER_S; the middle one's
    # case cannot be written (its row refused)
    settings.CASE_AFTER_S = 3600
    settings.CASE_AFTER_FAILURES = 2
    settings.RECONCILE_BACKOFF_BASE_S = 0  # due again at once: two passes, two tries
    payments = [unknown_payment(user, charged=False) for _ in range(3)]
    Payment.objects.update(created_at=timezone.now() - timedelta(hours=2))
    poison(
        "reconcile_case",
        f"NEW.kind = 'unresolved' AND NEW.subject_id = {payments[1].pk}",
        event="INSERT",
    )

    first = cases_run_once()

    # Then the other two are cases; the refused one is counted, not yet a case
    assert first.opened == 2
    assert set(Case.objects.values_list("subject_id", flat=True)) == {
        payments[0].pk,
        payments[2].pk,
    }
    assert ItemFailure.objects.get().key == str(payments[1].pk)

    # And the second failure in a row is a case of its own, about that payment
    settings.RECONCILE_BACKOFF_BASE_S = 60
    assert cases_run_once().opened == 0
    failed = Case.objects.get(kind=CaseKind.ITEM_FAILED)
    assert (failed.subject_type, failed.subject_id, failed.job) == (
        "payment",
        payments[1].pk,
        "cases-payments",
    )

    # When the row is fixed and a person asks for a retry
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER test_poison_0 ON reconcile_case")
    assert case_act(case_id=failed.pk, action="retry", note="trigger removed", user=ops).acted

    # Then the next pass opens its case and closes the failure's
    assert cases_run_once().opened == 1
    failed.refresh_from_db()
    assert failed.state == CaseState.RESOLVED
    assert not ItemFailure.objects.exists()
    assert Case.objects.filter(kind=CaseKind.UNRESOLVED, state=CaseState.OPEN).count() == 3
