"""Stray captures (a capture for a reference we hold no attempt for) whose refund the
provider declines: retried with a new reference after the reconciler's backoff,
one at a time, until one succeeds. The provider is the real sandbox over HTTP.

No Celery worker here: the stray charges notify a URL nobody serves.
"""

from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections
from django.utils import timezone

from operations.statements.importing import statement_reconcile
from operations.statements.jobs import leftovers_run_once
from reconcile.models import StrayCapture
from reconcile.recovery.strays import stray_refund_no
from tests.operations.statements.helpers import stray_charge, today
from tests.reconcile.test_declined_auto_refunds import (
    assert_audit_clean,
    provider_refunds,
    run_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.mark.parametrize("declines", [1, 2])
def test_a_declined_stray_refund_is_retried_with_a_new_reference_until_it_succeeds(
    declines, user, fault, wallet, quick_backoff
):
    # Given a capture for no attempt of ours, and its refund declined N times
    out_trade_no, trade_no = stray_charge(user)
    fault("decline", target="refund", count=declines)
    statement_reconcile(day=today())
    assert StrayCapture.objects.get().refund_status == "FAILED"

    # When the reconciler's passes run until it is refunded
    run_until(
        lambda: StrayCapture.objects.get().refund_status == "SUCCEEDED",
        step=leftovers_run_once,
        timeout_s=60,
    )

    # Then one refund at the provider succeeded, after N declined ones with other references
    at_provider = provider_refunds(out_trade_no)
    assert [status for _, status in at_provider] == ["DECLINED"] * declines + ["SUCCESS"]
    assert len({no for no, _ in at_provider}) == declines + 1
    stray = StrayCapture.objects.get()
    assert stray.refund_no == at_provider[-1][0] == stray_refund_no(trade_no, declines + 1)
    assert [no for no, _ in at_provider] == [
        stray_refund_no(trade_no, n) for n in range(1, declines + 2)
    ]
    assert stray.refund_attempts == declines + 1
    assert wallet(user)["refunded_total"] == stray.amount
    assert_audit_clean()


def test_a_declined_stray_refund_waits_for_the_backoff_and_races_start_it_once(
    user, fault, far_backoff
):
    # Given a stray capture whose refund was declined, and a backoff far away
    out_trade_no, _ = stray_charge(user)
    fault("decline", target="refund")
    statement_reconcile(day=today())
    stray = StrayCapture.objects.get()
    assert (stray.refund_status, stray.next_refund_at is not None) == ("FAILED", True)

    # When passes run before its time: the provider is not asked again
    for _ in range(3):
        leftovers_run_once()
    assert len(provider_refunds(out_trade_no)) == 1

    # When its time has come and three leftovers jobs race for it
    StrayCapture.objects.update(next_refund_at=timezone.now())
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def racer() -> None:
        try:
            barrier.wait()
            leftovers_run_once()
        except BaseException as error:
            errors.append(error)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=racer) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then one new refund was sent, and it succeeded
    assert errors == []
    assert [s for _, s in provider_refunds(out_trade_no)] == ["DECLINED", "SUCCESS"]
    stray = StrayCapture.objects.get()
    assert (stray.refund_status, stray.refund_attempts) == ("SUCCEEDED", 2)
    assert_audit_clean()
