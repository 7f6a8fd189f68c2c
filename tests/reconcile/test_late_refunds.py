"""A customer's refund the provider declines now and carries out later (sandbox
``late_success`` with ``target: refund``): the shop books the money that moved.

The provider is the real sandbox over HTTP; its late success and notifications
are Celery tasks run by a real worker. The refund request's key keeps replaying
its first answer (402, stored), as the contract says; the reconciler, asking the
provider about the notification it could not apply, settles the attempt from
the provider's query: SUCCEEDED, its ledger entry, the order's refunded amount.
"""

from __future__ import annotations

import pytest

from callbacks.models import ProviderNotification
from demo.sandbox.models import Refund as ProviderRefund
from operations.statements.passes import pass_run_once
from payments.models import LedgerEntry, Refund
from tests.reconcile.test_declined_auto_refunds import assert_audit_clean, run_until
from tests.reconcile.test_orphaned_captures import ledger_net

# Every test runs beside the real worker; it settles after each one (tests/conftest.py).
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.usefixtures("worker"),
]

LATE_S = 1.0


def test_a_customer_refund_declined_now_and_carried_out_later_is_booked(
    paid_order, refund, fault, user, wallet, worker, due_at_once
):
    # Given a refund the provider answers DECLINED now and carries out later
    fault("late_success", target="refund", delay_s=LATE_S)
    first = refund(key := "refund-declined-now")
    assert (first.status_code, first.json()["code"]) == (402, "refund-declined")
    attempt = Refund.objects.get()
    assert attempt.status == "FAILED"

    # When the provider refunds it after all, notifies, and the reconciler asks
    worker.wait_for(
        lambda: ProviderNotification.objects.filter(
            out_refund_no=attempt.refund_no, trade_status="SUCCESS"
        ).exists(),
        timeout=LATE_S * 5 + 30,
        what="the provider's late refund notification",
    )
    run_until(
        lambda: Refund.objects.get(pk=attempt.pk).status == "SUCCEEDED",
        step=pass_run_once,
        timeout_s=30,
    )

    # Then the books say what moved: one refund, one ledger entry, the order REFUNDED
    assert [s for s in ProviderRefund.objects.values_list("status", flat=True)] == ["SUCCESS"]
    paid_order.refresh_from_db()
    assert (paid_order.status, paid_order.refunded_amount) == ("REFUNDED", paid_order.amount)
    [entry] = LedgerEntry.objects.filter(kind="refund")
    assert (entry.refund_attempt_id, entry.amount) == (attempt.pk, paid_order.amount)
    account = wallet(user)
    assert account["refunded_total"] == paid_order.amount
    assert account["charged_total"] - account["refunded_total"] == ledger_net(user)
    # ... the key still replays its first answer (stored), and the audit is clean
    again = refund(key)
    assert (again.status_code, again.json()["code"]) == (402, "refund-declined")
    assert_audit_clean()
