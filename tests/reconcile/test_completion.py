"""The completer: abandoned requests are finished through their own flow, or left and reported."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from idempotency.core import fingerprint
from idempotency.models import IdempotencyKey, RecoveryPoint
from payments.flows import PayPoint
from payments.models import Payment
from payments.providers import get_provider
from payments.services import payment_settle
from reconcile.recovery import completion
from reconcile.recovery.completion import Completion, record_complete
from tests.assertions import assert_paid_once
from tests.conftest import new_key

pytestmark = pytest.mark.django_db(transaction=True)


def plant(user, *, path: str, point: str, payment: Payment | None = None, lock_age_s=None):
    """A record as a request that died at ``point`` leaves it (lock free, or ``lock_age_s`` old)."""
    locked_at = None if lock_age_s is None else timezone.now() - timedelta(seconds=lock_age_s)
    return IdempotencyKey.objects.create(
        user=user,
        key=new_key(),
        fingerprint=fingerprint(method="POST", path=path, body={}),
        method="POST",
        path=path,
        recovery_point=point,
        created_at=timezone.now(),
        lock_token=uuid.uuid4() if locked_at else None,
        locked_at=locked_at,
        resource_type="payment" if payment else "",
        resource_id=payment.pk if payment else None,
    )


def settle_as_notified(payment: Payment) -> None:
    """Settle the attempt from the provider's truth, as a notification would (callbacks/)."""
    truth = get_provider().query(out_trade_no=payment.out_trade_no)
    assert truth is not None
    payment_settle(payment_id=payment.pk, result=truth)


def test_a_request_whose_payment_was_settled_meanwhile_is_finished_and_replays(
    pay, fault, order, user, wallet
):
    # Given a pay request that got a 503, and the attempt settled by someone else
    # (a provider notification, as callbacks/ would apply it)
    fault("error_after_commit")
    key = new_key()
    assert pay(key).status_code == 503
    payment = Payment.objects.get()
    settle_as_notified(payment)

    # When the completer runs
    counts = completion.run_once()

    # Then the request is finished with the answer its retry now replays
    assert (counts.examined, counts.finished) == (1, 1)
    replay = pay(key)
    assert (replay.status_code, replay["Idempotent-Replayed"]) == (200, "true")
    assert replay.json()["status"] == "PAID"
    assert_paid_once(order, user, wallet)


def test_the_completer_never_charges_an_unsettled_attempt(pay, fault, order, user, wallet):
    fault("error_before_commit")  # nothing charged; the attempt is UNKNOWN
    key = new_key()
    assert pay(key).status_code == 503

    counts = completion.run_once()

    assert counts.awaiting_payment == 1
    assert Payment.objects.get().status == "UNKNOWN"
    assert wallet(user)["charged_total"] == 0
    record = IdempotencyKey.objects.get(key=key)
    assert (record.recovery_point, record.lock_token) == (PayPoint.PAYMENT_CREATED, None)


def test_a_lock_older_than_the_timeout_is_taken_over(pay, fault, order, user, wallet, settings):
    # Given a request killed after its attempt was settled: its lock is still held
    fault("error_after_commit")
    key = new_key()
    assert pay(key).status_code == 503
    payment = Payment.objects.get()
    settle_as_notified(payment)
    dead = uuid.uuid4()
    long_ago = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_LOCK_TIMEOUT + 1)
    IdempotencyKey.objects.filter(key=key).update(lock_token=dead, locked_at=long_ago)

    assert completion.run_once().finished == 1
    assert pay(key)["Idempotent-Replayed"] == "true"


def test_a_live_lock_is_left_alone(order, user, sandbox):
    payment = Payment.objects.create(
        order=order, out_trade_no="P-LIVE", amount=1, currency="CNY", payer=user.username
    )
    path = f"/api/v1/orders/{order.number}/pay/"
    record = plant(user, path=path, point=PayPoint.PAYMENT_CREATED, payment=payment, lock_age_s=1)

    assert completion.run_once().examined == 0  # not abandoned: not even looked at
    assert record_complete(record_id=record.pk) is Completion.BUSY
    record.refresh_from_db()
    assert record.locked_at is not None


def test_a_record_at_started_is_released_and_reported_never_guessed(order, user, sandbox):
    path = f"/api/v1/orders/{order.number}/pay/"
    record = plant(user, path=path, point=RecoveryPoint.STARTED, lock_age_s=3600)

    counts = completion.run_once()

    assert counts.started == 1
    record.refresh_from_db()
    assert (record.recovery_point, record.lock_token, record.locked_at) == ("started", None, None)
    assert not Payment.objects.exists()  # no attempt made on the client's behalf


def test_an_unknown_route_is_released_and_reported(order, user, sandbox):
    record = plant(user, path="/api/v1/unheard-of/", point="somewhere", lock_age_s=3600)

    assert completion.run_once().unsupported == 1
    record.refresh_from_db()
    assert (record.recovery_point, record.locked_at) == ("somewhere", None)


def test_a_completer_pass_with_one_record_the_database_refuses_finishes_the_others(
    user, unknown_payment, poison, sandbox, settings, due_at_once, ops
):
    from django.db import connection

    from operations.audit.run import audit_run
    from reconcile.desk.actions import case_act
    from reconcile.desk.models import Case, CaseState, ItemFailure
    from reconcile.recovery import fulfilment

    settings.CASE_AFTER_FAILURES = 2
    settings.RECONCILE_BACKOFF_BASE_S = 0  # due again at once: two passes, two tries
    # Given three pay requests abandoned after their attempts were charged and settled
    records = []
    for _ in range(3):
        payment = unknown_payment(user, charged=True)
        settle_as_notified(payment)
        path = f"/api/v1/orders/{payment.order.number}/pay/"
        records.append(plant(user, path=path, point=PayPoint.PAYMENT_CREATED, payment=payment))
    # ... the middle one stuck long enough for the audit to see it, and its row refused
    long_ago = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_LOCK_TIMEOUT + 60)
    IdempotencyKey.objects.filter(pk=records[1].pk).update(created_at=long_ago)
    poison("idempotency_idempotencykey", f"NEW.id = {records[1].pk}")

    counts = completion.run_once()

    # Then the other two are finished; the refused one is counted, not yet a case
    assert (counts.examined, counts.finished, counts.error) == (3, 2, 1)
    points = [IdempotencyKey.objects.get(pk=r.pk).recovery_point for r in records]
    assert points == ["finished", PayPoint.PAYMENT_CREATED, "finished"]
    failure = ItemFailure.objects.get()
    assert (failure.job, failure.key, failure.reference) == (
        "completion",
        str(records[1].pk),
        records[1].key,
    )
    assert not Case.objects.exists()

    # And the second failure in a row is a case holding the audit's finding (and backs
    # off as the reconciler's items do)
    settings.RECONCILE_BACKOFF_BASE_S = 60
    assert completion.run_once().error == 1
    case = Case.objects.get()
    assert (case.kind, case.subject_type, case.subject_id) == (
        "item-failed",
        "record",
        records[1].pk,
    )
    fulfilment.run_once()  # (the sweep ships the paid orders: no worker in this test)
    report = audit_run()
    assert (report.findings, report.open_cases) == ([], 1)
    assert [f.ids["record"] for f in report.waiting] == [records[1].pk]

    # When the row is fixed and a person asks for a retry
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER test_poison_0 ON idempotency_idempotencykey")
    assert completion.run_once().examined == 0  # (backing off until the retry)
    assert case_act(case_id=case.pk, action="retry", note="trigger removed", user=ops).acted
    assert completion.run_once().finished == 1

    # Then the case is closed by the machine and the audit is clean
    assert Case.objects.get().state == CaseState.RESOLVED
    assert not ItemFailure.objects.exists()
    assert audit_run().findings == []
    assert audit_run().open_cases == 0
