"""Reconciling unknown payments: roll forward or fence and roll back, never guess.

Every way an attempt becomes unknown (a timeout, a provider 5xx, a crash after
phase one), each with the provider having charged and not: one reconciler
pass settles the attempt from the provider's truth, debits the wallet once or
not at all, and finishes the request, so the customer's retry with the same
key replays the final answer.

Every test here runs twice: through the pass the shipped settings name
(RECONCILE_PAYMENT_PASS, the batched fast path) and through the core's own
``reconcile_due``, which must be correct on its own.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from django.utils.module_loading import import_string

from idempotency.models import IdempotencyKey
from orders.models import Order
from payments.flows import PayPoint
from payments.models import LedgerEntry, Payment
from payments.providers import get_provider
from payments.services import provider_idempotency_key
from reconcile.recovery import unsettled_payments as reconcile_payments
from reconcile.recovery.claims import backoff_delay_s
from tests.assertions import assert_paid_once
from tests.concurrency.helpers import run_at_once
from tests.conftest import new_key
from tests.injection import crash_on

pytestmark = pytest.mark.django_db(transaction=True)

# The passes over due attempts RECONCILE_PAYMENT_PASS may name: None keeps the shipped one.
PASSES = {"shipped": None, "core": "reconcile.recovery.unsettled_payments.reconcile_due"}


@pytest.fixture(autouse=True, params=list(PASSES.values()), ids=list(PASSES))
def payment_pass(request, settings) -> Any:
    """The module of the pass ``run_once`` runs here (its clock is ``_monotonic``)."""
    if request.param is not None:
        settings.RECONCILE_PAYMENT_PASS = request.param
    return sys.modules[import_string(settings.RECONCILE_PAYMENT_PASS).__module__]


# --- How an attempt becomes unknown ------------------------------------------------------


@dataclass(frozen=True)
class Cause:
    """A way to leave the attempt unknown: what the first answer is, and whether it charged."""

    send: Callable[..., Any]  # (pay, key, fault, settings, hanging_provider) -> response
    first_status: int
    charged: bool


def _timeout_after_charge(pay, key, fault, settings, hanging_provider):
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", delay_s=1.5)
    return pay(key)


def _timeout_before_reaching_it(pay, key, fault, settings, hanging_provider):
    sandbox = settings.PROVIDER_BASE_URL
    settings.PROVIDER_TIMEOUT_S = 0.5
    settings.PROVIDER_BASE_URL = hanging_provider  # the request never gets an answer
    try:
        return pay(key)
    finally:
        settings.PROVIDER_BASE_URL = sandbox


def _5xx(mode: str) -> Callable[..., Any]:
    def send(pay, key, fault, settings, hanging_provider):
        fault(mode)
        return pay(key)

    return send


def _crash_on(prefix: str) -> Callable[..., Any]:
    def send(pay, key, fault, settings, hanging_provider):
        with connection.execute_wrapper(crash_on(prefix)):
            return pay(key)

    return send


CAUSES = {
    "timeout, charged": Cause(_timeout_after_charge, 503, charged=True),
    "timeout, never reached": Cause(_timeout_before_reaching_it, 503, charged=False),
    "5xx after the charge": Cause(_5xx("error_after_commit"), 503, charged=True),
    "5xx before the charge": Cause(_5xx("error_before_commit"), 503, charged=False),
    # Phase one committed; the next statement (reading the attempt back) fails.
    "crash after payment_created": Cause(_crash_on('SELECT "payments_payment"'), 500, False),
    # The provider charged; phase two's first write fails.
    "crash after the provider charged": Cause(_crash_on('UPDATE "payments_payment"'), 500, True),
}


@pytest.mark.parametrize("cause", CAUSES.values(), ids=CAUSES.keys())
def test_an_unknown_attempt_is_resolved_and_the_same_key_replays_the_final_answer(
    cause, pay, fault, settings, hanging_provider, order, user, wallet, due_at_once
):
    # Given a pay request that left its attempt unknown
    key = new_key()
    assert cause.send(pay, key, fault, settings, hanging_provider).status_code == cause.first_status
    payment = Payment.objects.get()
    assert payment.status in ("PENDING", "UNKNOWN")
    assert IdempotencyKey.objects.get(key=key).recovery_point == PayPoint.PAYMENT_CREATED

    # When the reconciler runs
    counts = reconcile_payments.run_once()

    # Then the attempt is settled from the provider's truth, and its request finished
    assert (counts.claimed, counts.completed) == (1, 1)
    record = IdempotencyKey.objects.get(key=key)
    assert (record.recovery_point, record.resource_id) == ("finished", payment.pk)
    replay = pay(key)
    assert replay["Idempotent-Replayed"] == "true"
    if cause.charged:
        # rolled forward: PAID, one ledger entry, one debit, the order as the answer
        assert counts.rolled_forward == 1
        assert_paid_once(order, user, wallet)
        assert replay.status_code == 200
        assert replay.json()["status"] == "PAID"
        assert replay.json()["payments"][0]["status"] == "SUCCEEDED"
    else:
        # rolled back: fenced at the provider, FAILED, nothing debited, 402 payment-failed
        assert counts.rolled_back == 1
        payment.refresh_from_db()
        assert (payment.status, payment.failure_code) == ("FAILED", "closed")
        fence = get_provider().query(out_trade_no=payment.out_trade_no)
        assert fence is not None
        assert fence.status == "CLOSED"
        assert Order.objects.get(pk=order.pk).status == "UNPAID"
        assert not LedgerEntry.objects.exists()
        assert wallet(user)["charged_total"] == 0
        assert replay.status_code == 402
        assert replay.json()["code"] == "payment-failed"
        # ... and the order can be paid again, with a new key
        assert pay(new_key()).status_code == 200
        assert_paid_once(order, user, wallet)


def test_a_decline_answered_late_is_settled_as_declined(
    pay, fault, settings, order, user, wallet, due_at_once
):
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("decline")
    fault("timeout_after_commit", delay_s=1.5)
    key = new_key()
    assert pay(key).status_code == 503

    counts = reconcile_payments.run_once()

    assert (counts.rolled_back, counts.completed) == (1, 1)
    payment = Payment.objects.get()
    assert (payment.status, payment.failure_code) == ("FAILED", "do_not_honor")
    replay = pay(key)
    assert (replay.status_code, replay.json()["code"]) == (402, "payment-declined")
    assert replay["Idempotent-Replayed"] == "true"
    assert wallet(user)["charged_total"] == 0


def test_young_attempts_are_left_to_their_request(pay, fault, settings, order):
    # RECONCILE_AFTER_S (60 s by default): the client may still retry with its key.
    fault("error_before_commit")
    assert pay().status_code == 503

    counts = reconcile_payments.run_once()

    assert counts.claimed == 0
    assert Payment.objects.get().status == "UNKNOWN"


# --- After a rollback: the fence holds ------------------------------------------------------


def test_after_the_fence_a_late_charge_of_the_same_attempt_moves_no_money(
    pay, fault, order, user, wallet, due_at_once, settings
):
    fault("error_before_commit")
    assert pay().status_code == 503
    assert reconcile_payments.run_once().rolled_back == 1
    payment = Payment.objects.get()

    # A retry of the original charge arrives late (same derived key), or a new one
    def charge(idempotency_key: str) -> str:
        return (
            get_provider()
            .charge(
                out_trade_no=payment.out_trade_no,
                amount=payment.amount,
                currency=payment.currency,
                payer=payment.payer,
                notify_url=f"{settings.SHOP_BASE_URL}/nowhere/",  # allowed; never sent
                idempotency_key=idempotency_key,
            )
            .status
        )

    late = charge(provider_idempotency_key(payment))
    other = charge(new_key())

    assert (late, other) == ("CLOSED", "CLOSED")
    assert wallet(user)["charged_total"] == 0
    assert Payment.objects.get().status == "FAILED"


# --- Provider unreachable: counted, backed off, nothing guessed --------------------------------


def test_an_unreachable_provider_backs_off_and_nothing_is_guessed(
    pay, fault, order, user, wallet, settings, gone_provider, due_at_once
):
    fault("error_before_commit")
    key = new_key()
    assert pay(key).status_code == 503
    sandbox = settings.PROVIDER_BASE_URL
    settings.PROVIDER_BASE_URL = gone_provider

    before = timezone.now()
    counts = reconcile_payments.run_once()

    assert (counts.claimed, counts.unreachable, counts.completed) == (1, 1, 0)
    payment = Payment.objects.get()
    assert (payment.status, payment.reconcile_attempts) == ("UNKNOWN", 1)
    base = settings.RECONCILE_BACKOFF_BASE_S
    assert payment.next_reconcile_at is not None
    assert before + timedelta(seconds=base / 2) <= payment.next_reconcile_at
    assert payment.next_reconcile_at <= timezone.now() + timedelta(seconds=base)
    record = IdempotencyKey.objects.get(key=key)
    assert (record.recovery_point, record.lock_token) == ("payment_created", None)
    # Backing off: the next pass does not ask again before its time
    assert reconcile_payments.run_once().claimed == 0

    # When the provider is back and the backoff has passed, it is resolved
    settings.PROVIDER_BASE_URL = sandbox
    Payment.objects.update(next_reconcile_at=timezone.now())
    assert reconcile_payments.run_once().rolled_back == 1
    assert pay(key).json()["code"] == "payment-failed"
    assert wallet(user)["charged_total"] == 0


def test_each_failed_try_doubles_the_backoff_up_to_the_cap():
    low = [backoff_delay_s(attempt=n, base_s=30, cap_s=3600, rand=lambda: 0.0) for n in (1, 2, 3)]
    high = [backoff_delay_s(attempt=n, base_s=30, cap_s=3600, rand=lambda: 1.0) for n in (1, 2, 3)]

    assert low == [15, 30, 60]  # never sooner than half the window
    assert high == [30, 60, 120]
    assert backoff_delay_s(attempt=50, base_s=30, cap_s=3600, rand=lambda: 1.0) == 3600
    assert 1800 <= backoff_delay_s(attempt=50, base_s=30, cap_s=3600) <= 3600


# --- Two reconcilers at once ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("lease_s", [600, 0], ids=["leased", "no-lease"])
def test_two_concurrent_passes_settle_each_attempt_once(
    unknown_payment, user, wallet, settings, sandbox, due_at_once, lease_s
):
    # Without a lease (0 s) the passes may claim the same attempt one after the
    # other: the conditional settle still applies each attempt exactly once.
    settings.RECONCILE_LEASE_S = lease_s
    attempts = [unknown_payment(user, charged=n % 2 == 0) for n in range(6)]

    # Lock bypassed: the services themselves, in two threads with their own connections.
    passes = run_at_once(2, lambda _: reconcile_payments.run_once(batch_size=1))

    settled = sum(p.rolled_forward + p.rolled_back for p in passes)
    assert settled == 6
    assert sum(p.rolled_forward for p in passes) == 3
    if lease_s:
        assert sum(p.claimed for p in passes) == 6  # disjoint claims
    assert Payment.objects.filter(status="SUCCEEDED").count() == 3
    assert Payment.objects.filter(status="FAILED", failure_code="closed").count() == 3
    assert LedgerEntry.objects.count() == 3
    assert Order.objects.filter(status="PAID").count() == 3
    assert wallet(user)["charged_total"] == 3 * attempts[0].amount


def test_a_pass_out_of_time_hands_its_unprocessed_claims_back(
    unknown_payment, user, sandbox, monkeypatch, due_at_once, payment_pass
):
    for _ in range(3):
        unknown_payment(user, charged=False)
    # A clock that runs out right after the first attempt of the batch.
    ticks = iter([0.0, 0.0, 0.0])
    monkeypatch.setattr(payment_pass, "_monotonic", lambda: next(ticks, 100.0))

    counts = reconcile_payments.run_once(batch_size=3, budget_s=10)

    assert (counts.claimed, counts.rolled_back, counts.handed_back) == (3, 1, 2)
    assert Payment.objects.filter(status="UNKNOWN", next_reconcile_at=None).count() == 2
    monkeypatch.undo()
    assert reconcile_payments.run_once().rolled_back == 2  # due again at once


def test_with_no_pass_named_the_job_runs_the_core_s_own_pass(settings, monkeypatch):
    # RECONCILE_PAYMENT_PASS unset: the core's reconcile_due, given the job's arguments
    del settings.RECONCILE_PAYMENT_PASS
    ran: list[dict[str, Any]] = []

    def core_pass(**arguments: Any) -> reconcile_payments.ReconcileCounts:
        ran.append(arguments)
        return reconcile_payments.ReconcileCounts()

    monkeypatch.setattr(reconcile_payments, "reconcile_due", core_pass)

    reconcile_payments.run_once(provider=get_provider(), batch_size=7, budget_s=5)

    assert [(a["batch_size"], a["budget_s"]) for a in ran] == [(7, 5)]
