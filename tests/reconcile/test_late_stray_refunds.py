"""A stray capture's refund (a capture for a reference we hold no attempt for)
declined now and carried out later (the sandbox's ``late_success`` with ``target:
refund``), while the next attempt is live, sent or declined (docs/design.md,
"Late outcomes").

Every reference a stray ever used is derivable, so the provider is asked about
the earlier ones before another attempt starts or is sent, and a statement line
or a notification about any of them finds its stray. The provider is the real
sandbox over HTTP. No Celery worker: the test carries the refund out at the
provider (the sandbox's own late-success service, which its task runs) and
delivers the provider's notifications itself (the sandbox's own delivery), so
each step happens exactly when the scenario says.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from callbacks.models import ProviderNotification
from demo.sandbox.delivery import notification_deliver
from demo.sandbox.models import Notification as ProviderNotice
from demo.sandbox.models import Refund as ProviderRefund
from demo.sandbox.services.late_success import refund_late_success_settle
from operations.statements.importing import statement_download, statement_reconcile
from operations.statements.jobs import leftovers_run_once
from operations.statements.models import (
    LineOutcome,
    StatementDiscrepancy,
    StatementImport,
    StatementLine,
)
from operations.statements.settling import statement_match
from payments.providers import get_provider
from reconcile.desk.models import Case, ItemFailure
from reconcile.desk.services import notification_case_open
from reconcile.models import StrayCapture
from reconcile.recovery import notifications as notification_jobs
from reconcile.recovery.stray_retries import stray_refund_restart, strays_unrefunded
from reconcile.recovery.strays import stray_refund_no
from tests.callbacks.test_api import notify
from tests.concurrency.helpers import race
from tests.operations.statements.helpers import today
from tests.payments.test_pay_late_outcomes import CountingProvider
from tests.reconcile.test_declined_auto_refunds import assert_audit_clean, provider_refunds

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Long: the test, not the clock, carries the refund out (see the module).
LATER_S = 60  # the most the sandbox allows


def notified_stray_charge(user: User) -> tuple[str, str]:
    """A capture for a reference the shop never wrote, notifying the shop's endpoint."""
    out_trade_no = f"P-LOST-{uuid.uuid4().hex[:12]}"
    result = get_provider().charge(
        out_trade_no=out_trade_no,
        amount=777,
        currency="CNY",
        payer=user.username,
        notify_url=f"{settings.SHOP_BASE_URL}/api/v1/callbacks/sandbox/",
        idempotency_key=f"hand-{out_trade_no}",
    )
    assert result.status == "SUCCESS"
    assert result.trade_no
    return out_trade_no, result.trade_no


def deliver_all(out_trade_no: str) -> None:
    """The provider delivers every notification of the charge and its refunds, once."""
    pending = ProviderNotice.objects.filter(status=ProviderNotice.Status.PENDING)
    for notice in pending.order_by("pk"):
        if notice.payload.get("out_trade_no") == out_trade_no:
            notification_deliver(notification_id=notice.pk)


def first_declined_then_second_started(user, fault, *, silent: bool) -> StrayCapture:
    """S1 declined now (to be carried out later), and S2 started: live, not sent."""
    notified_stray_charge(user)
    fault("late_success", target="refund", delay_s=LATER_S)
    if silent:
        fault("callback_drop", target="refund")
    statement_reconcile(day=today())
    stray = StrayCapture.objects.get()
    assert (stray.refund_status, stray.refund_attempts) == ("FAILED", 1)
    StrayCapture.objects.update(next_refund_at=timezone.now())
    assert stray_refund_restart(stray=stray, provider=get_provider())
    assert (stray.refund_status, stray.refund_attempts) == ("PENDING", 2)
    return stray


def carry_out_first(stray: StrayCapture) -> None:
    """The provider carries S1 out now (as its late-success task would)."""
    first = ProviderRefund.objects.get(out_refund_no=stray_refund_no(stray.trade_no, 1))
    assert refund_late_success_settle(refund_id=first.pk) is not None
    assert ProviderRefund.objects.get(pk=first.pk).status == "SUCCESS"


def send_second(fault, *, answer_lost: bool) -> None:
    """The shop sends S2 (before S1 goes through) and the provider declines it; the
    shop hears the decline, or ("sent") its answer is lost."""
    fault("decline", target="refund")
    if answer_lost:
        fault("error_after_commit", target="refund")
    leftovers_run_once()
    assert StrayCapture.objects.get().refund_status == ("UNKNOWN" if answer_lost else "FAILED")


def learn(stray: StrayCapture, *, by: str) -> None:
    """The shop learns of S1's late success: its notification, or the statement alone."""
    if by == "notification":
        deliver_all(stray.out_trade_no)
        assert ProviderNotification.objects.filter(
            out_refund_no=stray_refund_no(stray.trade_no, 1), trade_status="SUCCESS"
        ).exists()
        leftovers_run_once()
    else:
        statement_reconcile(day=today())


def assert_refunded_once(stray: StrayCapture, user, wallet) -> None:
    """One refund at the provider (S1), the stray refunded by it, every notification and
    statement line resolved, the audit clean, and no further attempt started."""
    stray.refresh_from_db()
    first = stray_refund_no(stray.trade_no, 1)
    assert (stray.refund_status, stray.refund_no, stray.refund_attempts) == ("SUCCEEDED", first, 2)
    assert stray.refund_id == ProviderRefund.objects.get(out_refund_no=first).refund_id
    at_provider = provider_refunds(stray.out_trade_no)
    assert [s for _, s in at_provider].count("SUCCESS") == 1
    assert wallet(user)["refunded_total"] == stray.amount
    deliver_all(stray.out_trade_no)  # whatever the provider still had to tell
    leftovers_run_once()
    statement_reconcile(day=today())
    assert not StatementLine.objects.exclude(outcome=LineOutcome.STRAY).exists()
    assert not StatementDiscrepancy.objects.exists()
    assert not ProviderNotification.objects.filter(resolved_at__isnull=True).exclude(
        outcome__in=["applied", "duplicate"]
    )
    assert_audit_clean()
    for _ in range(2):
        StrayCapture.objects.update(next_refund_at=timezone.now())
        leftovers_run_once()
    assert provider_refunds(stray.out_trade_no) == at_provider
    assert StrayCapture.objects.get().refund_attempts == 2


@pytest.mark.parametrize("by", ["notification", "statement"])
def test_a_late_stray_refund_beside_a_live_attempt_is_recognised_and_the_attempt_never_sent(
    by, user, fault, wallet
):
    # Given S1 declined, S2 live and not sent yet, and S1 carried out late
    stray = first_declined_then_second_started(user, fault, silent=by == "statement")
    carry_out_first(stray)

    # When the shop learns of it (and its leftovers job runs)
    learn(stray, by=by)
    leftovers_run_once()

    # Then S1 is the stray's refund, and S2 was never sent
    assert provider_refunds(stray.out_trade_no) == [(stray_refund_no(stray.trade_no, 1), "SUCCESS")]
    assert_refunded_once(stray, user, wallet)


@pytest.mark.parametrize("by", ["notification", "statement"])
@pytest.mark.parametrize("later", ["sent", "declined"])
def test_a_late_stray_refund_beside_a_sent_or_declined_attempt_is_recognised(
    later, by, user, fault, wallet
):
    # Given S1 declined, S2 sent and declined (its answer heard, or lost), then S1
    # carried out late
    stray = first_declined_then_second_started(user, fault, silent=by == "statement")
    send_second(fault, answer_lost=later == "sent")
    carry_out_first(stray)

    # When the shop learns of it (and its leftovers job runs)
    learn(stray, by=by)
    leftovers_run_once()

    # Then S1 is the stray's refund; S2 stays the decline it was, and no S3 starts
    assert provider_refunds(stray.out_trade_no) == [
        (stray_refund_no(stray.trade_no, 1), "SUCCESS"),
        (stray_refund_no(stray.trade_no, 2), "DECLINED"),
    ]
    assert_refunded_once(stray, user, wallet)


def test_a_stray_refund_line_met_while_the_provider_is_away_waits_for_it(
    user, fault, wallet, settings, gone_provider
):
    # Given a stray capture refunded at the provider, its answer lost, and a statement
    # that lists the refund
    notified_stray_charge(user)
    fault("error_after_commit", target="refund")
    statement_reconcile(day=today())
    assert StrayCapture.objects.get().refund_status == "UNKNOWN"
    statement = StatementImport.objects.get()
    assert statement_download(statement=statement, provider=get_provider())[1] == 1

    # When its refund line is matched while the provider cannot be reached
    here = settings.PROVIDER_BASE_URL
    settings.PROVIDER_BASE_URL = gone_provider
    counts = statement_match(statement=statement, provider=get_provider())
    settings.PROVIDER_BASE_URL = here

    # Then the line waits (no discrepancy), and the next pass settles it
    assert counts.unreachable == 1
    refund_line = StatementLine.objects.get(kind="refund")
    assert refund_line.outcome == "pending"
    assert not StatementDiscrepancy.objects.exists()
    leftovers_run_once()
    assert StatementLine.objects.get(pk=refund_line.pk).outcome == "stray"
    assert StrayCapture.objects.get().refund_status == "SUCCEEDED"
    assert not StatementDiscrepancy.objects.exists()
    assert_audit_clean()


def declined_with_a_success_notice(user, fault) -> tuple[StrayCapture, ProviderNotification]:
    """A stray whose refund S1 was declined (its next attempt an hour away), and a
    signed notification that S1 succeeded, which the provider does not confirm."""
    fault("decline", target="refund")
    notified_stray_charge(user)
    statement_reconcile(day=today())
    stray = StrayCapture.objects.get()
    assert stray.refund_status == "FAILED"
    StrayCapture.objects.update(next_refund_at=timezone.now() + timedelta(hours=1))
    first = stray_refund_no(stray.trade_no, 1)
    notice = notify(
        {
            "event": "refund",
            "notify_id": f"N{uuid.uuid4().hex[:16]}",
            "refund_id": "RF-never",
            "out_refund_no": first,
            "out_trade_no": stray.out_trade_no,
            "status": "SUCCESS",
            "amount": stray.amount,
            "currency": stray.currency,
        }
    )
    assert notice.status_code < 500, notice.content
    late = ProviderNotification.objects.get(out_refund_no=first)
    assert late.outcome == "unmatched"
    return stray, late


def test_a_late_success_notice_the_provider_denies_is_asked_about_once_then_held_by_a_case(
    user, fault
):
    # Given a stray whose refund S1 was declined, its next attempt an hour away, and
    # a signed notification that S1 succeeded after all, which it did not
    stray, late = declined_with_a_success_notice(user, fault)
    first = stray_refund_no(stray.trade_no, 1)

    # When the leftovers job runs, twice
    provider = CountingProvider(get_provider())
    leftovers_run_once(provider=provider)
    asked_first = list(provider.asked)
    provider.asked.clear()
    leftovers_run_once(provider=provider)

    # Then the provider was asked about S1 at once (not after the backoff), denied
    # it, and the notification became a case; the next pass asks nothing and the
    # stray waits for its backoff: no S2, nothing more refunded
    assert asked_first == [first]
    assert provider.asked == []
    [case] = Case.objects.filter(subject_type="notification", subject_id=late.pk)
    assert (case.state, case.kind) == ("open", "unknown-notification")
    assert strays_unrefunded() == []
    stray.refresh_from_db()
    assert (stray.refund_status, stray.refund_attempts) == ("FAILED", 1)
    assert provider_refunds(stray.out_trade_no) == [(first, "DECLINED")]
    # ... and once its backoff is over it is due again, like any declined one
    StrayCapture.objects.update(next_refund_at=timezone.now())
    assert [s.pk for s in strays_unrefunded()] == [stray.pk]


def test_a_late_success_notice_held_by_a_case_does_not_make_its_stray_due(user, fault):
    # Given a declined stray refund waiting out its backoff, and a refund-success
    # notification about it that a case holds (a person took it)
    stray, late = declined_with_a_success_notice(user, fault)
    assert [s.pk for s in strays_unrefunded()] == [stray.pk]  # due at once, until held
    assert notification_case_open(notification=late) is not None

    # When the leftovers job looks for strays to refund, Then it finds none
    assert strays_unrefunded() == []


def test_two_reconcilers_and_a_notification_job_on_one_late_stray_refund_book_it_once(
    user, fault, wallet
):
    # Given S1 declined, S2 live and not sent yet, S1 carried out late and its
    # notification delivered (unmatched: no attempt of ours)
    stray = first_declined_then_second_started(user, fault, silent=False)
    carry_out_first(stray)
    deliver_all(stray.out_trade_no)

    # When two reconcilers' leftovers (no single-runner lock: as if it had expired)
    # and the notification job race, each in its own thread and connection
    errors = race(leftovers_run_once, leftovers_run_once, notification_jobs.run_once)

    # Then no error (none raised, none counted by an item's failure isolation), S1 recorded once as
    # the stray's refund, and S2 never sent
    assert errors == []
    assert not ItemFailure.objects.exists()
    assert provider_refunds(stray.out_trade_no) == [(stray_refund_no(stray.trade_no, 1), "SUCCESS")]
    assert_refunded_once(stray, user, wallet)
