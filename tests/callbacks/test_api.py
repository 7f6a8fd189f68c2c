"""POST /api/v1/callbacks/sandbox/: verify, dedupe, apply once, answer the same."""

import json
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from callbacks.models import ProviderNotification
from orders.models import Order
from payments.models import LedgerEntry, Payment
from payments.providers import ChargeResult, ChargeStatus
from payments.providers.sandbox import sign
from payments.services import payment_settle
from tests.concurrency.helpers import run_at_once

URL = "/api/v1/callbacks/sandbox/"


def body_for(payment: Payment, **overrides: Any) -> dict[str, Any]:
    return {
        "notify_id": f"N{uuid.uuid4().hex[:16]}",
        "trade_no": f"T-{payment.out_trade_no}",
        "out_trade_no": payment.out_trade_no,
        "trade_status": "SUCCESS",
        "amount": payment.amount,
        "currency": payment.currency,
        "paid_at": "2026-11-29T09:00:00+00:00",
        **overrides,
    }


def notify(
    body: Any,
    *,
    secret: str | None = None,
    t: int | None = None,
    header: str | None = None,
    raw: bytes | None = None,
) -> Any:
    payload = raw if raw is not None else json.dumps(body).encode()
    stamp = int(time.time()) if t is None else t
    secret = secret or settings.SANDBOX_WEBHOOK_SECRET.split(",")[0]
    signature = (
        header
        if header is not None
        else (f"t={stamp},v1={sign(secret=secret, timestamp=stamp, raw_body=payload)}")
    )
    headers = {"Sandbox-Signature": signature} if signature else {}
    return Client().post(URL, payload, content_type="application/json", headers=headers)


def assert_settled_once(payment: Payment) -> None:
    assert Payment.objects.get(pk=payment.pk).status == "SUCCEEDED"
    assert Order.objects.get(pk=payment.order_id).status == "PAID"
    assert LedgerEntry.objects.filter(order_id=payment.order_id).count() == 1


@pytest.mark.django_db
def test_a_success_notification_settles_the_payment(payment):
    response = notify(body_for(payment))

    assert response.status_code == 200
    assert response.json() == {"received": True}
    assert_settled_once(payment)
    row = ProviderNotification.objects.get()
    assert (row.outcome, row.payment_id) == ("applied", payment.pk)
    assert json.loads(row.raw_payload)["out_trade_no"] == payment.out_trade_no


@pytest.mark.django_db
def test_the_same_notification_three_times_answers_the_same_and_applies_once(payment):
    body = body_for(payment)

    answers = [notify(body) for _ in range(3)]

    assert {(a.status_code, a.content) for a in answers} == {(200, b'{"received":true}')}
    assert ProviderNotification.objects.count() == 1
    assert_settled_once(payment)


@pytest.mark.django_db
def test_a_new_notify_id_for_an_applied_trade_no_is_a_duplicate(payment):
    notify(body_for(payment))

    again = notify(body_for(payment))

    assert again.status_code == 200
    assert list(ProviderNotification.objects.values_list("outcome", flat=True)) == [
        "applied",
        "duplicate",
    ]
    assert_settled_once(payment)


@pytest.mark.django_db
@pytest.mark.parametrize("override", [{"amount": 1}, {"currency": "USD"}])
def test_amount_or_currency_mismatch_is_recorded_and_refused_every_time(payment, override):
    body = body_for(payment, **override)

    first = notify(body)
    again = notify(body)

    assert first.status_code == again.status_code == 422
    assert first.json()["code"] == "callback-mismatch"
    assert again.json() == first.json()
    assert ProviderNotification.objects.get().outcome == "rejected"
    assert Payment.objects.get(pk=payment.pk).status == "PENDING"
    assert Order.objects.get(pk=payment.order_id).status == "UNPAID"


@pytest.mark.django_db
def test_an_unknown_out_trade_no_is_recorded_and_refused(payment):
    response = notify(body_for(payment, out_trade_no="P-NOT-OURS"))

    assert response.status_code == 422
    assert response.json()["code"] == "callback-unknown-payment"
    assert ProviderNotification.objects.get().outcome == "unmatched"
    assert Payment.objects.get(pk=payment.pk).status == "PENDING"


@pytest.mark.django_db
def test_declined_after_success_never_moves_backwards(payment):
    notify(body_for(payment))

    late = notify(body_for(payment, trade_status="DECLINED"))

    assert late.status_code == 200
    outcomes = ProviderNotification.objects.values_list("outcome", flat=True)
    assert list(outcomes) == ["applied", "deferred"]
    assert_settled_once(payment)


@pytest.mark.django_db
def test_success_after_the_attempt_was_fenced_is_deferred_not_applied(payment):
    payment_settle(
        payment_id=payment.pk,
        result=ChargeResult(
            out_trade_no=payment.out_trade_no,
            status=ChargeStatus.CLOSED,
            trade_no="T-closed",
            amount=None,
            currency=None,
        ),
    )

    late = notify(body_for(payment))

    assert late.status_code == 200
    row = ProviderNotification.objects.get()
    assert row.outcome == "deferred"
    assert "FAILED" in row.reason
    assert Payment.objects.get(pk=payment.pk).status == "FAILED"
    assert Order.objects.get(pk=payment.order_id).status == "UNPAID"
    assert LedgerEntry.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_notification_racing_the_synchronous_answer_settles_once(payment):
    # The callback endpoint and the pay flow's phase two apply the same result at once.
    body = body_for(payment)
    result = ChargeResult(
        out_trade_no=payment.out_trade_no,
        status=ChargeStatus.SUCCESS,
        trade_no=body["trade_no"],
        amount=payment.amount,
        currency=payment.currency,
    )

    def racer(index: int) -> str:
        if index == 0:
            return "callback " + str(notify(body).status_code)
        return "sync " + payment_settle(payment_id=payment.pk, result=result).outcome.value

    outcomes = Counter(run_at_once(2, racer))

    assert outcomes["callback 200"] == 1
    assert sum(outcomes.values()) == 2
    assert_settled_once(payment)
    applied_by_callback = ProviderNotification.objects.get().outcome == "applied"
    assert applied_by_callback != (outcomes["sync applied"] == 1)


@pytest.mark.django_db(transaction=True)
def test_concurrent_redeliveries_of_one_notification_apply_once(payment):
    body = body_for(payment)

    statuses = Counter(run_at_once(10, lambda _i: notify(body).status_code))

    assert statuses == {200: 10}
    assert ProviderNotification.objects.count() == 1
    assert_settled_once(payment)


# --- Bad input: a clear 4xx, nothing stored or applied -------------------------------


def assert_nothing_applied(payment: Payment) -> None:
    assert ProviderNotification.objects.count() == 0
    assert Payment.objects.get(pk=payment.pk).status == "PENDING"


@pytest.mark.django_db
@pytest.mark.parametrize("case", ["forged", "stale", "future", "missing", "garbled", "tampered"])
def test_bad_signatures_are_400_and_nothing_is_stored(payment, case):
    body = body_for(payment)
    raw = json.dumps(body).encode()
    now = int(time.time())
    secret = settings.SANDBOX_WEBHOOK_SECRET
    good = f"t={now},v1={sign(secret=secret, timestamp=now, raw_body=raw)}"
    response = {
        "forged": lambda: notify(body, secret="not-the-secret"),
        "stale": lambda: notify(body, t=now - 301),
        "future": lambda: notify(body, t=now + 301),
        "missing": lambda: notify(body, header=""),
        "garbled": lambda: notify(body, header="v1=abc,t=yesterday"),
        "tampered": lambda: notify(body, header=good, raw=raw.replace(b"SUCCESS", b"DECLINED")),
    }[case]()

    assert response.status_code == 400
    assert response.json()["code"] == "signature-invalid"
    assert_nothing_applied(payment)


@pytest.mark.django_db
def test_secret_rotation_accepts_any_listed_secret(payment, settings):
    settings.SANDBOX_WEBHOOK_SECRET = "whsec-new,whsec-old"
    body = body_for(payment)
    raw = json.dumps(body).encode()
    now = int(time.time())
    # The provider signs with both while rotating; an old-only signature still counts.
    header = (
        f"t={now},v1={sign(secret='whsec-unrelated', timestamp=now, raw_body=raw)},"
        f"v1={sign(secret='whsec-old', timestamp=now, raw_body=raw)}"
    )

    assert notify(body, header=header, raw=raw).status_code == 200
    assert_settled_once(payment)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "raw",
    [
        b'{"notify_id": ',
        b"\xff\xfe not utf-8",
        b'["a", "list"]',
    ],
)
def test_malformed_signed_bodies_are_400(payment, raw):
    response = notify(None, raw=raw)

    assert response.status_code == 400
    assert response.json()["code"] == "callback-malformed"
    assert_nothing_applied(payment)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "override",
    [
        {"amount": "1999"},
        {"amount": True},
        {"amount": -5},
        {"trade_status": "MAYBE"},
        {"notify_id": 7},
        {"paid_at": "yesterday"},
        {"currency": None},
    ],
)
def test_wrong_types_are_400(payment, override):
    response = notify(body_for(payment, **override))

    assert response.status_code == 400
    assert response.json()["code"] == "callback-malformed"
    assert_nothing_applied(payment)


@pytest.mark.django_db
def test_a_huge_body_is_413(payment):
    body = body_for(payment, padding="x" * (settings.API_MAX_BODY_BYTES + 1))

    response = notify(body)

    assert response.status_code == 413
    assert_nothing_applied(payment)


@pytest.mark.django_db
def test_a_refused_attempt_is_logged_without_its_signature(payment, caplog):
    body = body_for(payment)
    raw = json.dumps(body).encode()
    forged = f"t={int(time.time())},v1={'ab' * 32}"

    with caplog.at_level("WARNING", logger="callbacks.api"):
        notify(body, header=forged, raw=raw)

    (record,) = [r for r in caplog.records if r.name == "callbacks.api"]
    assert "notification refused" in record.getMessage()
    assert str(len(raw)) in record.getMessage()
    assert "ab" * 32 not in record.getMessage()
    assert settings.SANDBOX_WEBHOOK_SECRET not in record.getMessage()


@pytest.mark.django_db
def test_a_row_refused_by_another_constraint_is_not_taken_for_a_redelivery(payment, caplog):
    from django.db import connection

    # Given a database that refuses the settlement's UPDATE of the attempt with a
    # unique violation of another constraint than the notification's own
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_refuse_as_unique() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION USING ERRCODE = 'unique_violation', "
            "CONSTRAINT = 'ledger_one_capture_per_trade_no'; END $$"
        )
        cursor.execute(
            f"CREATE TRIGGER test_refuse BEFORE UPDATE ON {Payment._meta.db_table} "
            "FOR EACH ROW EXECUTE FUNCTION test_refuse_as_unique()"
        )

    # When the notification comes, its INSERT is not the one refused: the error is
    # the one logged (a 500 for the provider to retry), not a lookup of a stored
    # answer that is not there
    response = notify(body_for(payment))

    assert response.status_code == 500
    assert "IntegrityError: unique_violation" in caplog.text
    assert "DoesNotExist" not in caplog.text
    assert not ProviderNotification.objects.exists()
