"""The Stripe adapter over HTTP against localstripe (tests/stripe_emulator.py), through
the real pay and refund flows: no mock of the SDK anywhere.

Where localstripe is not Stripe, the test says so and covers the behaviour the
flow depends on in another way.
"""

import hashlib
import hmac
import json
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from callbacks.models import ProviderNotification
from idempotency.models import IdempotencyKey
from operations.audit.run import audit_run
from operations.statements.importing import statement_reconcile
from operations.statements.models import StatementImport
from operations.statements.passes import pass_run_once
from operations.statements.report import statement_report
from orders.models import Order
from payments.flows import PayPoint
from payments.models import LedgerEntry, Payment, PaymentStatus, Refund
from payments.providers import (
    ChargeStatus,
    Notification,
    NotificationSignatureInvalid,
    ProviderRejected,
    StatementKind,
    get_provider,
)
from payments.providers.stripe import StripeProvider
from payments.selectors import RecordedReferences
from payments.services import payment_create, provider_idempotency_key
from tests.conftest import client_for, new_key
from tests.factories import pay_record_plant
from tests.stripe_emulator import TEST_KEY, WEBHOOK_SECRET, emulator, intents_of

pytestmark = pytest.mark.django_db(transaction=True)


def _prepared(user, order):
    """An attempt whose PaymentIntent was created and recorded, never confirmed: what a
    crash between create and confirm leaves (the record at charge_prepared)."""
    payment = payment_create(user_id=user.pk, order_number=order.number)
    provider = get_provider()
    assert isinstance(provider, StripeProvider)
    intent_id = provider.prepare_charge(
        out_trade_no=payment.out_trade_no,
        amount=payment.amount,
        currency=payment.currency,
        idempotency_key=provider_idempotency_key(payment),
    )
    Payment.objects.filter(pk=payment.pk).update(trade_no=intent_id)
    key = pay_record_plant(user, order, point=PayPoint.CHARGE_PREPARED, payment=payment)
    return payment, intent_id, key


def test_pay_creates_then_confirms_one_payment_intent(stripe_shop, pay, order):
    response = pay()

    assert response.status_code == 200, response.content
    payment = Payment.objects.get(order=order)
    assert payment.status == PaymentStatus.SUCCEEDED
    (intent,) = intents_of(stripe_shop, payment.out_trade_no)
    assert intent["id"] == payment.trade_no
    assert intent["status"] == "succeeded"
    assert intent["amount"] == order.amount
    assert intent["currency"] == order.currency.lower()
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID


def test_the_pay_record_passes_through_charge_prepared(stripe_shop, pay, order, monkeypatch):
    key = new_key()
    seen: list[str | None] = []
    original = StripeProvider.charge

    def watching(self, **kwargs):
        seen.append(IdempotencyKey.objects.get(key=key).recovery_point)
        seen.append(Payment.objects.get(order=order).trade_no)
        return original(self, **kwargs)

    monkeypatch.setattr(StripeProvider, "charge", watching)  # a spy on our adapter, not the SDK
    assert pay(key).status_code == 200

    # When charge (the confirm) ran, the PaymentIntent's id was already committed.
    assert seen[0] == PayPoint.CHARGE_PREPARED
    assert seen[1] == Payment.objects.get(order=order).trade_no


def test_crash_after_create_before_confirm_resumes_with_the_same_payment_intent(
    stripe_shop, pay, order, user
):
    payment, intent_id, key = _prepared(user, order)

    response = pay(key)

    assert response.status_code == 200, response.content
    (intent,) = intents_of(stripe_shop, payment.out_trade_no)
    assert intent["id"] == intent_id
    assert intent["status"] == "succeeded"
    assert Payment.objects.get(pk=payment.pk).trade_no == intent_id


def test_a_lost_confirm_answer_is_resolved_by_retrieve(stripe_shop, pay, order, user):
    # Given a PaymentIntent confirmed at Stripe whose answer never reached us
    payment, intent_id, key = _prepared(user, order)
    emulator(stripe_shop).v1.payment_intents.confirm(intent_id)
    Payment.objects.filter(pk=payment.pk).update(status=PaymentStatus.UNKNOWN)

    # When the client retries, the flow retrieves before confirming
    response = pay(key)

    # Then it settles from the truth; a second confirm would have been refused
    assert response.status_code == 200, response.content
    assert Payment.objects.get(pk=payment.pk).status == PaymentStatus.SUCCEEDED
    (intent,) = intents_of(stripe_shop, payment.out_trade_no)
    assert intent["status"] == "succeeded"


def test_double_click_pay_confirms_one_payment_intent(stripe_shop, order, user):
    key = new_key()
    answers = []

    def click():
        answers.append(
            client_for(user).post(
                f"/api/v1/orders/{order.number}/pay/",
                format="json",
                headers={"Idempotency-Key": key},
            )
        )

    clicks = [threading.Thread(target=click) for _ in range(2)]
    for thread in clicks:
        thread.start()
    for thread in clicks:
        thread.join()

    assert sorted(answer.status_code for answer in answers) in ([200, 200], [200, 409])
    payment = Payment.objects.get(order=order)
    intents = intents_of(stripe_shop, payment.out_trade_no)
    assert [intent["status"] for intent in intents] == ["succeeded"]


def test_cancel_is_the_fence(stripe_shop, order, user):
    payment, intent_id, _ = _prepared(user, order)
    provider = get_provider()

    fenced = provider.close(out_trade_no=payment.out_trade_no)

    assert fenced.status is ChargeStatus.CLOSED
    assert fenced.trade_no == intent_id
    truth = provider.query(out_trade_no=payment.out_trade_no)
    assert truth is not None
    assert truth.status is ChargeStatus.CLOSED
    # Once cancelled, the PaymentIntent can never be confirmed: charge answers CLOSED.
    again = provider.charge(
        out_trade_no=payment.out_trade_no,
        amount=payment.amount,
        currency=payment.currency,
        payer=payment.payer,
        notify_url="",
        idempotency_key=provider_idempotency_key(payment) + "-again",
    )
    assert again.status is ChargeStatus.CLOSED


def test_close_of_a_succeeded_payment_intent_answers_the_capture(stripe_shop, pay, order):
    assert pay().status_code == 200
    payment = Payment.objects.get(order=order)

    answer = get_provider().close(out_trade_no=payment.out_trade_no)

    assert answer.status is ChargeStatus.SUCCESS
    assert answer.trade_no == payment.trade_no


def test_a_declining_card_is_a_decline(stripe_shop, order, user):
    payment = payment_create(user_id=user.pk, order_number=order.number)
    declining = StripeProvider(
        api_key=TEST_KEY,
        webhook_secret=WEBHOOK_SECRET,
        api_base=stripe_shop,
        timeout_s=5.0,
        references=RecordedReferences(),
        payment_method="pm_card_chargeCustomerFail",  # Stripe's test card that declines
    )
    terms: dict[str, Any] = {
        "out_trade_no": payment.out_trade_no,
        "amount": payment.amount,
        "currency": payment.currency,
        "idempotency_key": provider_idempotency_key(payment),
    }
    intent_id = declining.prepare_charge(**terms)
    Payment.objects.filter(pk=payment.pk).update(trade_no=intent_id)

    answer = declining.charge(payer=payment.payer, notify_url="", **terms)

    assert answer.status is ChargeStatus.DECLINED
    assert answer.decline_reason
    truth = declining.query(out_trade_no=payment.out_trade_no)
    assert truth is not None
    assert truth.status is ChargeStatus.DECLINED


def test_charge_never_confirms_a_payment_intent_it_has_not_recorded(stripe_shop, order, user):
    # Money moved through an unrecorded PaymentIntent would be invisible to query and
    # to the fence: charge refuses before anything is sent.
    payment = payment_create(user_id=user.pk, order_number=order.number)

    with pytest.raises(ProviderRejected):
        get_provider().charge(
            out_trade_no=payment.out_trade_no,
            amount=payment.amount,
            currency=payment.currency,
            payer=payment.payer,
            notify_url="",
            idempotency_key=provider_idempotency_key(payment),
        )
    assert intents_of(stripe_shop, payment.out_trade_no) == []


def test_localstripe_does_not_replay_a_create_by_its_idempotency_key(stripe_shop):
    # Stripe replays a POST with the same Idempotency-Key; localstripe makes a second
    # object. The flow never relies on the replay: it records the PaymentIntent's id
    # before confirming (charge_prepared) and resumes with it (tests above).
    client = emulator(stripe_shop)
    params: Any = {"amount": 100, "currency": "cny", "payment_method": "pm_card_visa"}
    first = client.v1.payment_intents.create(params=params, options={"idempotency_key": "k"})
    second = client.v1.payment_intents.create(params=params, options={"idempotency_key": "k"})
    assert first["id"] != second["id"]


def test_partial_then_full_refund(stripe_shop, pay, order, client):
    assert pay().status_code == 200
    payment = Payment.objects.get(order=order)

    def refund(amount=None):
        body = {"reason": "test"} if amount is None else {"amount": amount, "reason": "test"}
        return client.post(
            f"/api/v1/orders/{order.number}/refunds/",
            body,
            format="json",
            headers={"Idempotency-Key": new_key()},
        )

    first = refund(100)
    assert first.status_code == 200, first.content
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    rest = refund()
    assert rest.status_code == 200, rest.content
    assert Order.objects.get(pk=order.pk).status == Order.Status.REFUNDED

    assert payment.trade_no is not None
    refunds = emulator(stripe_shop).v1.refunds.list(params={"payment_intent": payment.trade_no})
    ours = {r["metadata"]["out_refund_no"]: r["amount"] for r in refunds.data}
    assert ours == {r.refund_no: r.amount for r in Refund.objects.filter(payment=payment)}
    assert sum(ours.values()) == order.amount
    for attempt in Refund.objects.filter(payment=payment):
        found = get_provider().query_refund(out_refund_no=attempt.refund_no)
        assert found is not None
        assert found.refund_id == attempt.refund_id


def test_the_audit_is_clean_without_the_sandbox_wallet_check(stripe_shop, pay, order, client):
    assert pay().status_code == 200
    refunded = client.post(
        f"/api/v1/orders/{order.number}/refunds/",
        {"amount": 100, "reason": "test"},
        format="json",
        headers={"Idempotency-Key": new_key()},
    )
    assert refunded.status_code == 200

    report = audit_run()

    assert [finding for finding in report.findings] == []
    # The wallet check is the demo's plug-in (AUDIT_PLUGINS): for the sandbox only.
    checks = [row.check for row in report.summary]
    assert "provider: charges and net debits match the ledger" not in checks
    assert "statements: imported, every line matched" in checks


def _signed(body: bytes, secret: str = WEBHOOK_SECRET, *, age_s: int = 0) -> str:
    """A Stripe-Signature header for ``body``, as Stripe signs it ``age_s`` ago."""
    at = int(time.time()) - age_s
    mac = hmac.new(secret.encode(), f"{at}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at},v1={mac}"


def _event(kind: str, obj: dict[str, Any], event_id: str, **extra: Any) -> bytes:
    return json.dumps(
        {"id": event_id, "object": "event", "type": kind, **extra, "data": {"object": obj}}
    ).encode()


def test_a_webhook_is_verified_by_the_sdk_and_a_forged_one_refused(stripe_shop, pay, order):
    assert pay().status_code == 200
    payment = Payment.objects.get(order=order)
    body = _event(
        "payment_intent.succeeded",
        {
            "id": payment.trade_no,
            "object": "payment_intent",
            "amount": payment.amount,
            "currency": payment.currency.lower(),
            "metadata": {"out_trade_no": payment.out_trade_no},
        },
        "evt_1",
        created=int(time.time()),
    )
    provider = get_provider()

    notification = provider.verify_notification(
        headers={"Stripe-Signature": _signed(body)},
        raw_body=body,
    )
    assert isinstance(notification, Notification)
    assert notification.out_trade_no == payment.out_trade_no
    assert notification.trade_status is ChargeStatus.SUCCESS

    for forged in (
        _signed(body, "whsec_someone_else"),
        _signed(body, age_s=301),  # past the 300 s tolerance
    ):
        with pytest.raises(NotificationSignatureInvalid):
            provider.verify_notification(headers={"Stripe-Signature": forged}, raw_body=body)


# --- The webhook endpoint ------------------------------------------------------------

WEBHOOK_WAIT_S = 20.0  # localstripe sends an event a second after it happens


def _await_notification(**filters: Any) -> ProviderNotification:
    deadline = time.monotonic() + WEBHOOK_WAIT_S
    while time.monotonic() < deadline:
        if row := ProviderNotification.objects.filter(provider="stripe", **filters).first():
            return row
        time.sleep(0.05)  # polling the table: the delivery is localstripe's, not ours
    raise AssertionError(f"no Stripe notification {filters} within {WEBHOOK_WAIT_S} s")


def _post_event(body: bytes, signature: str | None = None) -> Any:
    """POST ``body`` to the Stripe webhook, signed with our secret unless ``signature``."""
    return APIClient().post(
        "/api/v1/callbacks/stripe/",
        body,
        content_type="application/json",
        headers={"Stripe-Signature": signature or _signed(body)},
    )


def test_a_delivered_webhook_is_stored_once_and_a_duplicate_replays(
    stripe_shop, stripe_webhooks, pay, order
):
    # localstripe signs and POSTs its events to the endpoint registered with it.
    assert pay().status_code == 200
    payment = Payment.objects.get(order=order)

    delivered = _await_notification(out_trade_no=payment.out_trade_no)

    # The pay's own answer settled the attempt first: the event changed nothing.
    assert delivered.outcome == ProviderNotification.Outcome.DUPLICATE
    assert delivered.payment_id == payment.pk
    # Stripe delivers at least once: the same event again is the stored answer, no row.
    body = delivered.raw_payload.encode()
    again = _post_event(body)
    assert again.status_code == delivered.response_status
    assert again.json() == delivered.response_body
    assert ProviderNotification.objects.filter(notify_id=delivered.notify_id).count() == 1


def test_a_forged_webhook_is_refused_and_nothing_stored(stripe_shop, pay, order):
    assert pay().status_code == 200
    payment = Payment.objects.get(order=order)
    body = json.dumps(
        {
            "id": "evt_forged",
            "type": "payment_intent.succeeded",
            "data": {"object": {"id": payment.trade_no, "metadata": {}}},
        }
    ).encode()

    answer = _post_event(body, _signed(body, "whsec_not_ours"))

    assert answer.status_code == 400
    assert answer.json()["code"] == "signature-invalid"
    assert not ProviderNotification.objects.filter(provider="stripe").exists()


def test_every_stored_event_is_answered_2xx_with_its_outcome_in_the_body(
    stripe_shop, pay, order, settings
):
    # Stripe retries anything but a 2xx for three days (and may disable the endpoint):
    # what the shop stored is acknowledged, whatever it made of it; the outcome is in
    # the body, for whoever reads the endpoint's log at Stripe.
    assert pay().status_code == 200
    payment = Payment.objects.get(order=order)
    other_amount = _event(
        "payment_intent.succeeded",
        {
            "id": payment.trade_no,
            "object": "payment_intent",
            "amount": payment.amount + 1,
            "currency": payment.currency.lower(),
            "status": "succeeded",
            "metadata": {"out_trade_no": payment.out_trade_no},
        },
        "evt_other_amount",
    )
    not_ours = _event(
        "refund.updated",
        {
            "id": "re_made_elsewhere",
            "object": "refund",
            "amount": 100,
            "currency": payment.currency.lower(),
            "status": "succeeded",
            "metadata": {"out_refund_no": "R-NOT-OURS", "out_trade_no": "P-NOT-OURS"},
        },
        "evt_not_ours",
    )

    for body, notify_id, outcome, code in (
        (other_amount, "evt_other_amount", "rejected", "callback-mismatch"),
        (not_ours, "evt_not_ours", "unmatched", "callback-unknown-payment"),
    ):
        first, again = _post_event(body), _post_event(body)

        assert (first.status_code, again.status_code) == (200, 200), first.content
        assert first.json() == again.json()
        assert first.json()["outcome"] == outcome
        assert first.json()["code"] == code
        row = ProviderNotification.objects.get(provider="stripe", notify_id=notify_id)
        assert (row.outcome, row.response_status) == (outcome, 200)
    # Only a bad signature asks for a retry (test_a_forged_webhook_is_refused_...).

    # The reconciler asks Stripe about the payment the other amount named: settled
    # already, so that notification is resolved; the unknown refund is a person's.
    settings.RECONCILE_AFTER_S = 0
    pass_run_once()
    assert ProviderNotification.objects.get(notify_id="evt_other_amount").resolved_at is not None
    assert audit_run().findings == []


def test_an_event_the_shop_does_not_apply_is_stored_and_acknowledged(stripe_shop):
    body = _event("customer.created", {"id": "cus_1"}, "evt_other")

    answers = [_post_event(body) for _ in "ab"]

    assert [answer.status_code for answer in answers] == [200, 200]
    (row,) = ProviderNotification.objects.filter(provider="stripe", notify_id="evt_other")
    assert row.outcome == ProviderNotification.Outcome.IGNORED
    assert row.reason == "customer.created"


def test_the_statement_is_the_days_balance_transactions(stripe_shop, pay, order, client):
    assert pay().status_code == 200
    refunded = client.post(
        f"/api/v1/orders/{order.number}/refunds/",
        {"amount": 100, "reason": "test"},
        format="json",
        headers={"Idempotency-Key": new_key()},
    )
    assert refunded.status_code == 200
    payment = Payment.objects.get(order=order)
    attempt = Refund.objects.get(payment=payment)

    today = timezone.now().date()
    lines = list(get_provider().statement(day=today))
    yesterday = list(get_provider().statement(day=today - timedelta(days=1)))

    ours = {(line.kind, line.provider_id, line.reference, line.amount) for line in lines}
    assert (StatementKind.CHARGE, payment.trade_no, payment.out_trade_no, order.amount) in ours
    assert (StatementKind.REFUND, attempt.refund_id, attempt.refund_no, 100) in ours
    assert {line.currency for line in lines if line.reference == payment.out_trade_no} == {
        order.currency
    }
    # The day before holds none of them (the lines are read newest first, up to the day).
    references = {line.reference for line in yesterday}
    assert payment.out_trade_no not in references
    assert attempt.refund_no not in references


def test_a_payment_failed_event_settles_the_attempt_declined(stripe_shop, order, user):
    # localstripe sends payment_failed only for a confirm it declines; the body is
    # Stripe's documented event, signed as Stripe signs it.
    payment, intent_id, _ = _prepared(user, order)
    body = _event(
        "payment_intent.payment_failed",
        {
            "id": intent_id,
            "object": "payment_intent",
            "amount": payment.amount,
            "currency": payment.currency.lower(),
            "status": "requires_payment_method",
            "metadata": {"out_trade_no": payment.out_trade_no},
        },
        "evt_failed",
    )

    answer = _post_event(body)

    assert answer.status_code == 200, answer.content
    assert Payment.objects.get(pk=payment.pk).status == PaymentStatus.FAILED
    row = ProviderNotification.objects.get(provider="stripe", notify_id="evt_failed")
    assert row.outcome == ProviderNotification.Outcome.APPLIED


def test_a_refund_updated_event_settles_the_refund(stripe_shop, pay, order, client):
    assert pay().status_code == 200
    refunded = client.post(
        f"/api/v1/orders/{order.number}/refunds/",
        {"amount": 100, "reason": "test"},
        format="json",
        headers={"Idempotency-Key": new_key()},
    )
    assert refunded.status_code == 200
    attempt = Refund.objects.get(payment__order=order)
    # localstripe sends no refund events: Stripe's documented refund.updated, signed.
    body = _event(
        "refund.updated",
        {
            "id": attempt.refund_id,
            "object": "refund",
            "amount": 100,
            "currency": order.currency.lower(),
            "status": "succeeded",
            "metadata": {
                "out_refund_no": attempt.refund_no,
                "out_trade_no": attempt.payment.out_trade_no,
            },
        },
        "evt_refund",
    )

    answer = _post_event(body)

    assert answer.status_code == 200, answer.content
    row = ProviderNotification.objects.get(provider="stripe", notify_id="evt_refund")
    assert row.outcome == ProviderNotification.Outcome.DUPLICATE  # the refund's answer came first
    assert row.refund_attempt_id == attempt.pk


# --- What Stripe refuses, and what is not final yet -------------------------------


def test_a_create_stripe_refuses_declines_the_attempt_and_charges_nothing(
    stripe_shop, pay, order, monkeypatch
):
    # Given a payment method Stripe does not know: the PaymentIntent create is refused
    monkeypatch.setattr(get_provider(), "payment_method", "pm_not_a_payment_method")

    response = pay()

    # Then the answer is the stored decline, with the provider's refusal as its reason
    assert response.status_code == 402, response.content
    assert response.json()["code"] == "payment-declined"
    payment = Payment.objects.get(order=order)
    assert payment.status == PaymentStatus.FAILED
    assert payment.failure_code.startswith("provider-rejected:")
    # And nothing exists at Stripe, nothing was recorded as its id, the order is unpaid
    assert payment.trade_no is None
    assert intents_of(stripe_shop, payment.out_trade_no) == []
    assert Order.objects.get(pk=order.pk).status == Order.Status.UNPAID
    assert not LedgerEntry.objects.filter(payment=payment).exists()


def test_a_card_stripe_declines_at_confirm_is_a_stored_decline(
    stripe_shop, pay, order, monkeypatch
):
    monkeypatch.setattr(get_provider(), "payment_method", "pm_card_chargeCustomerFail")
    key = new_key()

    response = pay(key)

    assert response.status_code == 402, response.content
    assert response.json()["code"] == "payment-declined"
    payment = Payment.objects.get(order=order)
    assert payment.status == PaymentStatus.FAILED
    assert payment.failure_code == "card_declined"
    (intent,) = intents_of(stripe_shop, payment.out_trade_no)
    assert intent["id"] == payment.trade_no
    assert intent["status"] == "requires_payment_method"  # charged nothing
    assert Order.objects.get(pk=order.pk).status == Order.Status.UNPAID
    assert not LedgerEntry.objects.filter(payment=payment).exists()
    # The same key replays the stored decline without asking Stripe again
    assert pay(key).json() == response.json()


# --- The seam: nothing of the sandbox's when the shop uses Stripe -------------------


def test_the_sandboxs_endpoint_is_not_there_for_a_shop_on_stripe(stripe_shop):
    body = json.dumps({"notify_id": "n-1", "out_trade_no": "P-1", "trade_status": "SUCCESS"})

    answer = APIClient().post(
        "/api/v1/callbacks/sandbox/",
        body,
        content_type="application/json",
        headers={"Sandbox-Signature": _signed(body.encode())},
    )

    assert answer.status_code == 404
    assert not ProviderNotification.objects.exists()


def test_the_statement_is_imported_and_reported_under_stripes_name(stripe_shop, pay, order):
    assert pay().status_code == 200
    today = timezone.now().date()

    statement_reconcile(day=today)

    (imported,) = StatementImport.objects.all()
    assert imported.provider == "stripe"
    report = statement_report(day=today)
    assert report.statement == imported
    # localstripe keeps the earlier tests' money too (one server per session): ours is
    # among the lines the report counts as matched.
    assert sum(row.matched for row in report.rows if row.side == "provider") >= 1
