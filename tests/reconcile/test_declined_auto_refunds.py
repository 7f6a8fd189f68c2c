"""Automatic refunds the provider declines are retried until one succeeds (docs/design.md,
"Orphaned captures": the reconciler retries an orphaned capture's refund until it succeeds).

A declined refund is final at the provider for its ``out_refund_no``, so a retry is
a new refund attempt with a new reference (and the provider key derived from it),
started only after the reconciler's backoff, one at a time, never more than the
capture in total. The provider is the real sandbox over HTTP; its declines are
scripted faults with ``target: refund``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import close_old_connections
from django.utils import timezone

from demo.sandbox.models import Refund as ProviderRefund
from operations.audit.run import audit_run
from operations.statements.passes import pass_run_once
from payments.models import LedgerEntry, Payment, Refund
from payments.orphans import orphan_refund_start
from reconcile.recovery import unsettled_refunds as refund_jobs
from tests.reconcile.test_orphaned_captures import (
    declined_late,
    ledger_net,
    orphan_gauges,
    success_notified,
)

# Every test runs beside the real worker; it settles after each one (tests/conftest.py).
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.usefixtures("worker"),
]


def provider_refunds(out_trade_no: str) -> list[tuple[str, str]]:
    """What the provider holds for the charge: (out_refund_no, status), oldest first."""
    return list(
        ProviderRefund.objects.filter(charge__out_trade_no=out_trade_no)
        .order_by("pk")
        .values_list("out_refund_no", "status")
    )


def run_until(done: Callable[[], bool], *, step: Callable[[], Any], timeout_s: float) -> int:
    """Run ``step`` until ``done``; how many steps it took."""
    deadline = time.monotonic() + timeout_s
    steps = 0
    while not done():
        assert time.monotonic() < deadline, "never done"
        step()
        steps += 1
        time.sleep(0.1)
    return steps


def orphaned(pay, fault, worker) -> Payment:
    """A late capture for an order another attempt paid: an orphan, its refund started."""
    late = declined_late(pay, fault)
    assert pay().status_code == 200
    success_notified(worker, late)
    return late


def assert_audit_clean() -> None:
    report = audit_run()
    assert report.ok, [finding.message for finding in report.findings]


# --- Orphaned captures ---------------------------------------------------------------


@pytest.mark.parametrize("declines", [1, 3])
def test_a_declined_orphan_refund_is_retried_with_a_new_reference_until_it_succeeds(
    declines, pay, fault, order, user, wallet, worker, quick_backoff
):
    # Given an orphaned capture whose automatic refund the provider declines N times
    late = orphaned(pay, fault, worker)
    fault("decline", target="refund", count=declines)

    # When the reconciler runs its passes until the money is back
    run_until(
        lambda: LedgerEntry.objects.filter(payment=late, kind="orphan_refund").exists(),
        step=pass_run_once,
        timeout_s=60,
    )

    # Then N declined attempts and one that succeeded, each with its own reference
    attempts = list(Refund.objects.filter(payment=late).order_by("pk"))
    assert [a.status for a in attempts] == ["FAILED"] * declines + ["SUCCEEDED"]
    assert len({a.refund_no for a in attempts}) == declines + 1
    assert {a.reason for a in attempts} == {"orphaned-capture"}
    # ... exactly one refund at the provider succeeded, and the books say so once
    at_provider = provider_refunds(late.out_trade_no)
    assert [status for _, status in at_provider] == ["DECLINED"] * declines + ["SUCCESS"]
    assert [no for no, _ in at_provider] == [a.refund_no for a in attempts]
    assert LedgerEntry.objects.filter(payment=late, kind="orphan_refund").count() == 1
    account = wallet(user)
    assert account["refunded_total"] == order.amount
    assert account["charged_total"] - account["refunded_total"] == ledger_net(user)
    assert set(orphan_gauges().values()) == {0.0}
    assert_audit_clean()


def test_the_next_orphan_refund_waits_for_the_backoff(pay, fault, order, user, worker, far_backoff):
    # Given an orphaned capture whose first automatic refund was declined, the next
    # attempt far away
    late = orphaned(pay, fault, worker)
    fault("decline", target="refund")
    pass_run_once()
    assert provider_refunds(late.out_trade_no) == [(f"R{late.out_trade_no}-1", "DECLINED")]

    # When the reconciler runs again and again before the backoff is over
    for _ in range(3):
        pass_run_once()

    # Then the provider is not asked again; the next attempt waits, live, counted
    assert len(provider_refunds(late.out_trade_no)) == 1
    waiting = Refund.objects.get(payment=late, status="PENDING")
    assert waiting.refund_no == f"R{late.out_trade_no}-2"
    assert waiting.next_reconcile_at is not None
    assert waiting.next_reconcile_at > timezone.now()
    gauges = orphan_gauges()
    assert gauges["onceshop_orphaned_captures_unrefunded"] == 1

    # When its time comes, it is sent and succeeds
    Refund.objects.filter(pk=waiting.pk).update(next_reconcile_at=timezone.now())
    pass_run_once()
    assert Refund.objects.get(pk=waiting.pk).status == "SUCCEEDED"
    assert_audit_clean()


def test_two_reconcilers_at_once_start_one_new_orphan_refund(
    pay, fault, order, user, wallet, worker, quick_backoff
):
    # Given an orphaned capture whose automatic refund was declined
    late = orphaned(pay, fault, worker)
    fault("decline", target="refund")
    pass_run_once()
    assert Refund.objects.get(payment=late).status == "FAILED"

    # When two refund jobs (no single-runner lock: as if it had expired) and two direct
    # restarts race, each in its own thread and connection
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def racer(work: Callable[[], Any]) -> None:
        try:
            barrier.wait()
            work()
        except BaseException as error:
            errors.append(error)
        finally:
            close_old_connections()

    threads = [
        threading.Thread(target=racer, args=(work,))
        for work in (
            refund_jobs.run_once,
            refund_jobs.run_once,
            lambda: orphan_refund_start(payment_id=late.pk),
            lambda: orphan_refund_start(payment_id=late.pk),
        )
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then exactly one new attempt exists, and at most one was ever live at once
    assert errors == []
    attempts = list(Refund.objects.filter(payment=late).order_by("pk"))
    assert [a.refund_no for a in attempts] == [f"R{late.out_trade_no}-1", f"R{late.out_trade_no}-2"]
    assert attempts[0].status == "FAILED"
    # ... and once it is due, the money goes back once
    run_until(
        lambda: Refund.objects.filter(payment=late, status="SUCCEEDED").exists(),
        step=pass_run_once,
        timeout_s=30,
    )
    assert Refund.objects.filter(payment=late).count() == 2
    assert [s for _, s in provider_refunds(late.out_trade_no)] == ["DECLINED", "SUCCESS"]
    assert wallet(user)["refunded_total"] == order.amount
    assert_audit_clean()
