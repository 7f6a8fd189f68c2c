"""POST /api/v1/orders/{number}/refunds/: the refund flow against the real sandbox."""

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from idempotency.models import IdempotencyKey
from idempotency.services import idempotency_key_reap
from operations.audit.run import audit_run
from payments.models import LedgerEntry, Refund
from payments.providers import ChargeResult, ChargeStatus
from payments.refund_flows import RefundPoint
from payments.services import payment_create, payment_settle
from tests.assertions import assert_refunded_once
from tests.conftest import client_for, new_key
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_full_refund_gives_everything_back_once_and_the_order_becomes_refunded(
    refund, paid_order, user, wallet
):
    key = new_key()

    response = refund(key, body={"reason": "changed my mind"})

    assert response.status_code == 200
    assert response["Idempotent-Replayed"] == "false"
    body = response.json()
    assert (body["status"], body["refunded_amount"]) == ("REFUNDED", paid_order.amount)
    [entry] = body["refunds"]
    assert entry["status"] == "SUCCEEDED"
    assert (entry["amount"], entry["reason"]) == (paid_order.amount, "changed my mind")
    assert entry["refund_id"]
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)
    # The capture stays in the books: a refund is its own entry.
    assert LedgerEntry.objects.filter(order=paid_order, kind="capture").count() == 1

    replay = refund(key, body={"reason": "changed my mind"})

    assert replay["Idempotent-Replayed"] == "true"
    assert replay.content == response.content
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


def test_a_partial_refund_leaves_the_order_paid_then_the_rest_refunds_it(
    refund, paid_order, user, wallet
):
    first = refund(body={"amount": 1000})

    assert first.status_code == 200
    assert (first.json()["status"], first.json()["refunded_amount"]) == ("PAID", 1000)
    assert_refunded_once(paid_order, user, wallet, refunded=1000)

    rest = refund()  # no amount: whatever is left

    assert rest.status_code == 200
    assert rest.json()["status"] == "REFUNDED"
    assert [r["amount"] for r in rest.json()["refunds"]] == [1000, paid_order.amount - 1000]
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


def test_more_than_the_rest_is_409_stored_and_nothing_moves(refund, paid_order, user, wallet):
    assert refund(body={"amount": 1000}).status_code == 200
    key = new_key()

    too_much = refund(key, body={"amount": paid_order.amount - 999})

    assert too_much.status_code == 409
    assert too_much.json()["code"] == "refund-exceeds-paid"
    assert too_much.json()["refundable"] == paid_order.amount - 1000
    assert refund(key, body={"amount": paid_order.amount - 999})["Idempotent-Replayed"] == "true"
    assert Refund.objects.count() == 1
    assert_refunded_once(paid_order, user, wallet, refunded=1000)


@pytest.mark.parametrize("state", ["unpaid", "refunded", "cancelled"])
def test_an_order_that_is_not_paid_is_not_refundable_409_stored(refund, pay, client, order, state):
    if state == "refunded":
        assert pay().status_code == 200
        assert refund().status_code == 200
    if state == "cancelled":
        cancel = client.post(
            f"/api/v1/orders/{order.number}/cancel/", headers={"Idempotency-Key": new_key()}
        )
        assert cancel.status_code == 200
    key = new_key()

    refused = refund(key)

    assert refused.status_code == 409
    assert refused.json()["code"] == "order-not-refundable"
    assert refund(key)["Idempotent-Replayed"] == "true"
    assert Refund.objects.filter(status="PENDING").count() == 0


def test_a_refund_in_progress_makes_another_409(refund, paid_order):
    Refund.objects.create(
        order=paid_order,
        payment=paid_order.payments.get(),
        refund_no="R-IN-FLIGHT",
        amount=1,
        currency=paid_order.currency,
    )

    refused = refund(body={"amount": 1})

    assert refused.status_code == 409
    assert refused.json()["code"] == "order-not-refundable"
    assert "in progress" in refused.json()["detail"]


def test_someone_elses_order_is_404_not_stored_but_staff_may_refund_it(
    refund, paid_order, other_user, user, wallet
):
    key = new_key()

    assert refund(key, api=client_for(other_user)).status_code == 404
    assert not IdempotencyKey.objects.filter(key=key).exists()

    staff = client_for(UserFactory.create(is_staff=True))
    assert refund(api=staff).status_code == 200
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


@pytest.mark.parametrize(
    "body",
    [
        {"amount": 0},
        {"amount": -5},
        {"amount": "all"},
        {"amount": 10**13},
        # The schema says integer and string: a string amount or a number reason is
        # a client bug named, not coerced; a NUL fits no column.
        {"amount": "100"},
        {"reason": 5},
        {"reason": "x" * 201},
        {"reason": "duplicate\u0000"},
    ],
)
def test_a_bad_body_is_400_and_not_stored(refund, paid_order, body):
    key = new_key()

    response = refund(key, body=body)

    assert response.status_code == 400
    assert response.json()["code"] == "validation-error"
    assert not IdempotencyKey.objects.filter(key=key).exists()


# --- The provider misbehaves (faults with target refund) ------------------------------


def test_declined_is_402_stored_and_a_new_key_refunds(refund, fault, paid_order, user, wallet):
    fault("decline", target="refund")
    key = new_key()

    declined = refund(key)

    assert declined.status_code == 402
    assert declined.json()["code"] == "refund-declined"
    assert refund(key)["Idempotent-Replayed"] == "true"
    assert Refund.objects.get().status == "FAILED"
    assert_refunded_once(paid_order, user, wallet, refunded=0)
    assert refund().status_code == 200
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


@pytest.mark.parametrize("mode", ["error_before_commit", "error_after_commit"])
def test_provider_5xx_is_503_unknown_and_the_same_key_resumes(
    refund, fault, paid_order, user, wallet, mode
):
    fault(mode, target="refund")
    key = new_key()

    unknown = refund(key)

    assert unknown.status_code == 503
    assert unknown.json()["code"] == "refund-outcome-unknown"
    assert unknown["Retry-After"] == "2"
    assert Refund.objects.get().status == "UNKNOWN"
    record = IdempotencyKey.objects.get(key=key)
    assert (record.recovery_point, record.response_status) == (RefundPoint.REFUND_CREATED, None)
    # Refunded already (after_commit) or not at all: the retry asks first.
    assert wallet(user)["refunded_total"] == (paid_order.amount if "after" in mode else 0)

    retried = refund(key)

    assert retried.status_code == 200
    assert retried["Idempotent-Replayed"] == "false"
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


def test_a_timeout_after_the_provider_refunded_is_503_then_the_same_key_finds_it(
    refund, fault, paid_order, user, wallet, settings
):
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", target="refund", delay_s=1.5)
    key = new_key()

    unknown = refund(key)

    assert unknown.status_code == 503
    assert unknown.json()["reason"].startswith("POST /v1/refunds: ReadTimeout")
    retried = refund(key)
    assert retried.status_code == 200
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)
    assert len([r for r in wallet(user).get("refunds", []) if r["status"] == "SUCCESS"]) <= 1


@pytest.mark.parametrize("mode", ["callback_duplicates", "callback_shuffle", "callback_drop"])
def test_notification_faults_do_not_change_the_synchronous_answer(
    refund, fault, paid_order, user, wallet, mode
):
    fault(mode, target="refund")

    assert refund().status_code == 200
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


def test_charge_faults_do_not_touch_refunds(refund, fault, paid_order, user, wallet):
    fault("decline")  # target charge (the default)

    assert refund().status_code == 200
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


# --- Behaviour matrix rows (docs/design.md) on the refund endpoint --------------------


def test_missing_key_is_400_and_not_stored(client, paid_order):
    response = client.post(f"/api/v1/orders/{paid_order.number}/refunds/", {}, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "idempotency-key-missing"
    assert not Refund.objects.exists()


def test_the_same_key_for_another_body_is_422_and_changes_nothing(refund, paid_order, user, wallet):
    key = new_key()
    assert refund(key, body={"amount": 1000}).status_code == 200

    mismatch = refund(key, body={"amount": 999})

    assert mismatch.status_code == 422
    assert mismatch.json()["code"] == "idempotency-key-mismatch"
    assert_refunded_once(paid_order, user, wallet, refunded=1000)


def test_the_same_key_while_the_provider_is_being_asked_is_409(
    refund, fault, paid_order, user, wallet, settings
):
    # Given a refund waiting on a slow provider (record committed at refund_created)
    settings.PROVIDER_TIMEOUT_S = 5
    fault("timeout_after_commit", target="refund", delay_s=1.5)
    key = new_key()
    answers: dict[str, Any] = {}
    first = threading.Thread(target=lambda: answers.setdefault("first", refund(key)))
    first.start()
    deadline = time.monotonic() + 5
    while not IdempotencyKey.objects.filter(
        key=key, recovery_point=RefundPoint.REFUND_CREATED
    ).exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)

    # When the client double-clicks
    second = refund(key)
    first.join()

    # Then the second is told to come back, and the first refunds once
    assert second.status_code == 409
    assert second.json()["code"] == "idempotency-key-in-use"
    assert "Retry-After" in second
    assert answers["first"].status_code == 200
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


def test_a_refund_the_provider_refuses_with_a_4xx_is_402_declined_and_final(
    refund, order, user, sandbox
):
    # Given an order PAID in our books through a charge the provider never saw
    payment = payment_create(user_id=user.pk, order_number=order.number)
    payment_settle(
        payment_id=payment.pk,
        result=ChargeResult(
            out_trade_no=payment.out_trade_no,
            status=ChargeStatus.SUCCESS,
            trade_no="T-UNKNOWN-TO-PROVIDER",
            amount=payment.amount,
            currency=payment.currency,
        ),
    )
    key = new_key()

    # When it is refunded: the provider answers 404 charge-not-found
    refused = refund(key)

    # Then nothing was refunded, and that is final (not "unknown")
    assert refused.status_code == 402
    assert refused.json()["code"] == "refund-declined"
    assert refused.json()["reason"] == "rejected-charge-not-found"
    assert Refund.objects.get().status == "FAILED"
    assert refund(key)["Idempotent-Replayed"] == "true"


def test_the_same_refund_key_after_its_record_was_reaped_is_409_reused_never_a_second_refund(
    refund, paid_order, user, wallet, settings
):
    # Given a partial refund with key K, whose record the reaper deleted after the window
    key = new_key()
    assert refund(key, body={"amount": 1000}).status_code == 200
    IdempotencyKey.objects.filter(key=key).update(
        finished_at=timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL + 1)
    )
    assert idempotency_key_reap().deleted >= 1
    assert not IdempotencyKey.objects.filter(key=key).exists()

    # When the same request comes again with K: a new request for the key layer
    late = refund(key, body={"amount": 1000})

    # Then the refund table's (order, key) index answers: 409, and nothing moved again
    assert late.status_code == 409, late.content
    assert late.json()["code"] == "idempotency-key-reused"
    assert late["Idempotent-Replayed"] == "false"
    assert Refund.objects.filter(order=paid_order).count() == 1
    assert_refunded_once(paid_order, user, wallet, refunded=1000)
    # A new key still refunds the rest
    assert refund(body={}).status_code == 200
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)
    assert audit_run().findings == []
