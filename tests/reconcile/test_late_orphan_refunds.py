"""An orphaned capture's automatic refund declined now and carried out later (the
sandbox's ``late_success`` with ``target: refund``), while the next attempt is live,
sent or declined (docs/design.md, "Late outcomes").

The late success is booked once, whatever is beside it; the later attempt is
cancelled before it is sent, or declined harmlessly by the provider (nothing is
left to refund); no further attempt starts. The shop learns of the late success
by its notification, or from the statement alone (``callback_drop``). The
provider is the real sandbox over HTTP, its late success and notifications
Celery tasks run by a real worker.
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from callbacks.models import ProviderNotification
from demo.sandbox.models import Refund as ProviderRefund
from operations.statements.importing import statement_reconcile
from operations.statements.models import LineOutcome, StatementDiscrepancy, StatementLine
from operations.statements.passes import pass_run_once
from payments.models import LedgerEntry, Payment, Refund
from payments.orphans import orphan_refund_start
from payments.providers import ProviderOutcomeUnknown, get_provider
from payments.refunds import refund_send, refund_settle
from payments.services import Settlement
from reconcile.desk.models import ItemFailure
from reconcile.recovery import notifications as notification_jobs
from reconcile.recovery import unsettled_refunds as refund_jobs
from tests.concurrency.helpers import race
from tests.operations.statements.helpers import today
from tests.reconcile.test_declined_auto_refunds import (
    orphaned,
    provider_refunds,
    run_until,
)
from tests.reconcile.test_orphaned_captures import assert_books_balance

# Every test runs beside the real worker; it settles after each one (tests/conftest.py).
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.usefixtures("worker"),
]

LATE_S = 1.0


def declined_first_refund(pay, fault, worker, settings, *, silent: bool) -> Payment:
    """An orphaned capture whose first refund (A1) the provider declines now and
    carries out LATE_S later, and its second attempt (A2) created, due far away."""
    late = orphaned(pay, fault, worker)
    fault("late_success", target="refund", delay_s=LATE_S)
    if silent:
        fault("callback_drop", target="refund")
    # A2 waits: the test decides when it is sent (the cap too, or it is 2 s)
    settings.RECONCILE_BACKOFF_BASE_S = settings.RECONCILE_BACKOFF_CAP_S = 3600
    job = notification_jobs.run_once()  # books the orphaned capture, starts A1
    assert job.resolved == 1
    refund_jobs.run_once()  # sends A1: declined
    refund_jobs.run_once()  # asks about A1 (declined still), starts A2
    assert [r.status for r in Refund.objects.filter(payment=late)] == ["FAILED", "PENDING"]
    return late


def carried_out(worker, refund: Refund, *, notified: bool) -> None:
    """Wait for the provider to carry A1 out (and, if ``notified``, for its notification)."""
    if notified:
        worker.wait_for(
            lambda: ProviderNotification.objects.filter(
                out_refund_no=refund.refund_no, trade_status="SUCCESS"
            ).exists(),
            timeout=LATE_S * 5 + 30,
            what="the late refund's notification",
        )
    else:
        worker.wait_for(
            lambda: ProviderRefund.objects.filter(
                out_refund_no=refund.refund_no, status="SUCCESS"
            ).exists(),
            timeout=LATE_S * 5 + 30,
            what="the provider's late refund",
        )


def send_second(second: Refund, fault, *, answer_lost: bool) -> None:
    """A2 reaches the provider after A1 went through there: declined, nothing left.

    Sent as the reconciler sends it, but without its ask about A1 right before (a
    send already under way when A1 was carried out), then settled with its answer.
    """
    Refund.objects.filter(pk=second.pk).update(next_reconcile_at=timezone.now())
    if answer_lost:  # declined there, and neither its answer nor its notification arrive
        fault("error_after_commit", target="refund")
        fault("callback_drop", target="refund")
    try:
        answer = refund_send(refund=Refund.objects.get(pk=second.pk), provider=get_provider())
    except ProviderOutcomeUnknown:
        return
    assert refund_settle(refund_attempt_id=second.pk, result=answer).outcome is Settlement.APPLIED


def assert_refunded_once(late: Payment, first: Refund, user, wallet) -> None:
    """One refund at the provider, one ledger entry, the statement matched, audit clean."""
    at_provider = provider_refunds(late.out_trade_no)
    assert [s for _, s in at_provider].count("SUCCESS") == 1
    assert (first.refund_no, "SUCCESS") in at_provider
    [entry] = LedgerEntry.objects.filter(payment=late, kind="orphan_refund")
    assert entry.refund_attempt_id == first.pk
    assert Refund.objects.get(pk=first.pk).status == "SUCCEEDED"
    assert wallet(user)["refunded_total"] == late.amount
    statement_reconcile(day=today())
    assert not StatementLine.objects.exclude(outcome=LineOutcome.MATCHED).exists()
    assert not StatementDiscrepancy.objects.exists()
    assert_books_balance(user, wallet)
    # ... and no further attempt starts, however many passes run
    attempts = Refund.objects.filter(payment=late).count()
    for _ in range(2):
        pass_run_once()
    assert Refund.objects.filter(payment=late).count() == attempts
    assert len(provider_refunds(late.out_trade_no)) == len(at_provider)


def learn(*, by: str) -> None:
    """The shop learns of A1's late success: its notification (the notification job
    asks the provider), or the statement alone."""
    if by == "notification":
        assert notification_jobs.run_once().resolved == 1
    else:
        statement_reconcile(day=today())


@pytest.mark.parametrize("by", ["notification", "statement"])
def test_a_late_orphan_refund_beside_a_live_attempt_is_booked_and_the_attempt_never_sent(
    by, pay, fault, order, user, wallet, worker, quick_backoff, settings
):
    # Given A1 declined, A2 live and not sent yet, and A1 carried out late
    late = declined_first_refund(pay, fault, worker, settings, silent=by == "statement")
    first, second = Refund.objects.filter(payment=late).order_by("pk")
    carried_out(worker, first, notified=by == "notification")

    # When the shop learns of it, and the refund job runs
    learn(by=by)
    refund_jobs.run_once()

    # Then A1 is booked once and A2 was cancelled without being sent
    second.refresh_from_db()
    assert (second.status, second.failure_code) == ("FAILED", "superseded")
    assert provider_refunds(late.out_trade_no) == [(first.refund_no, "SUCCESS")]
    assert_refunded_once(late, first, user, wallet)


@pytest.mark.parametrize("by", ["notification", "statement"])
@pytest.mark.parametrize("later", ["sent", "declined"])
def test_a_late_orphan_refund_beside_a_sent_or_declined_attempt_is_booked_once(
    later, by, pay, fault, order, user, wallet, worker, quick_backoff, settings
):
    # Given A1 declined, carried out late at the provider, and A2 sent after it: the
    # provider declines A2 (nothing left), and we hear it ("declined") or not ("sent")
    late = declined_first_refund(pay, fault, worker, settings, silent=by == "statement")
    first, second = Refund.objects.filter(payment=late).order_by("pk")
    carried_out(worker, first, notified=by == "notification")
    send_second(second, fault, answer_lost=later == "sent")
    second.refresh_from_db()
    assert second.status == ("PENDING" if later == "sent" else "FAILED")

    # When the shop learns of A1's success, and the refund job runs
    learn(by=by)
    refund_jobs.run_once()

    # Then A1 is booked once, A2 is settled as the provider's decline
    second.refresh_from_db()
    assert second.status == "FAILED"
    assert provider_refunds(late.out_trade_no) == [
        (first.refund_no, "SUCCESS"),
        (second.refund_no, "DECLINED"),
    ]
    assert_refunded_once(late, first, user, wallet)


def test_before_a_new_orphan_refund_the_provider_is_asked_about_the_earlier_ones(
    pay, fault, order, user, wallet, worker, quick_backoff, settings
):
    # Given A1 declined and carried out late, and A2 declined: nothing live, nothing
    # booked, and the shop told of neither (callback_drop, no statement yet)
    late = declined_first_refund(pay, fault, worker, settings, silent=True)
    first, second = Refund.objects.filter(payment=late).order_by("pk")
    carried_out(worker, first, notified=False)
    send_second(second, fault, answer_lost=False)

    # When the reconciler would start A3
    started = orphan_refund_start(payment_id=late.pk)

    # Then it asked about A1 and A2 first, booked A1, and started nothing
    assert started is None
    assert Refund.objects.filter(payment=late).count() == 2
    assert_refunded_once(late, first, user, wallet)


def test_before_an_orphan_refund_is_sent_the_provider_is_asked_about_the_earlier_ones(
    pay, fault, order, user, wallet, worker, quick_backoff, settings
):
    # Given A1 declined and carried out late while A2 waited out its backoff, and the
    # shop told of nothing (callback_drop, no statement yet)
    late = declined_first_refund(pay, fault, worker, settings, silent=True)
    first, second = Refund.objects.filter(payment=late).order_by("pk")
    carried_out(worker, first, notified=False)

    # When A2 is due and the refund job would send it
    Refund.objects.filter(pk=second.pk).update(next_reconcile_at=timezone.now())
    counts = refund_jobs.run_once()

    # Then it asked about A1 first, booked it, and cancelled A2 without sending it
    assert (counts.refunded, counts.superseded) == (0, 1)
    second.refresh_from_db()
    assert (second.status, second.failure_code) == ("FAILED", "superseded")
    assert provider_refunds(late.out_trade_no) == [(first.refund_no, "SUCCESS")]
    assert_refunded_once(late, first, user, wallet)


@pytest.mark.parametrize("later", ["live", "declined"])
def test_two_reconcilers_and_a_notification_job_on_one_late_refund_book_it_once(
    later, pay, fault, order, user, wallet, worker, quick_backoff, settings
):
    # Given A1 carried out late, its notification deferred, and A2 beside it: live and
    # due (the reconcilers send or cancel it), or declined (each reconciler, about to
    # start A3, asks about A1 and settles it)
    late = declined_first_refund(pay, fault, worker, settings, silent=False)
    first, second = Refund.objects.filter(payment=late).order_by("pk")
    carried_out(worker, first, notified=True)
    if later == "declined":
        send_second(second, fault, answer_lost=False)
    else:
        Refund.objects.filter(pk=second.pk).update(next_reconcile_at=timezone.now())

    # When two reconcilers (no single-runner lock: as if it had expired), the
    # notification job and a statement import race, each in its own thread and
    # connection
    errors = race(
        refund_jobs.run_once,
        refund_jobs.run_once,
        notification_jobs.run_once,
        lambda: statement_reconcile(day=today()),
    )

    # Then no deadlock, no error (none raised, none counted by an item's failure isolation), and
    # A1 booked once
    assert errors == []
    assert not ItemFailure.objects.exists()
    run_until(
        lambda: not Refund.objects.filter(payment=late, status__in=["PENDING", "UNKNOWN"]),
        step=refund_jobs.run_once,
        timeout_s=30,
    )
    assert LedgerEntry.objects.filter(payment=late, kind="orphan_refund").count() == 1
    assert Refund.objects.get(payment=late, status="SUCCEEDED").pk == first.pk
    assert_refunded_once(late, first, user, wallet)
