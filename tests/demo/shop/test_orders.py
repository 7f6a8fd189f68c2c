"""My orders, the order page, and its pay button (through the API's own pay flow)."""

from typing import Any

import pytest
from django.test import Client

from idempotency.models import IdempotencyKey
from orders.models import Order
from payments.flows import PayPoint
from payments.models import Payment
from tests.assertions import assert_paid_once, assert_refunded_once
from tests.conftest import client_for, new_key
from tests.demo.shop.conftest import BackgroundWork
from tests.factories import pay_record_plant

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def provider(sandbox: str) -> str:
    """Every test here may pay: the sandbox provider runs on the live server."""
    return sandbox


def pay_key(response: Any) -> str:
    return str(response.context["pay_key"])


def pay(web: Client, order: Order, key: str, **headers: Any) -> Any:
    return web.post(f"/orders/{order.number}/pay/", {"idempotency_key": key}, headers=headers)


def test_my_orders_lists_mine_only(web, order, other_user, product):
    client_for(other_user).post(
        "/api/v1/orders/",
        {"lines": [{"sku": product.sku, "quantity": 1}]},
        format="json",
        headers={"Idempotency-Key": new_key()},
    )

    page = web.get("/orders/").content.decode()

    assert order.number in page
    assert Order.objects.count() == 2
    assert Order.objects.exclude(pk=order.pk).get().number not in page


def test_someone_elses_order_is_not_found(order, web_for, other_user):
    other = web_for(other_user)

    assert other.get(f"/orders/{order.number}/").status_code == 404
    assert other.post(f"/orders/{order.number}/pay/", {"idempotency_key": "k"}).status_code == 404


def test_the_pay_button_charges_once_and_shows_a_fresh_answer(web, order, user, wallet):
    key = pay_key(web.get(f"/orders/{order.number}/"))

    response = pay(web, order, key)

    answer = response.context["answer"]
    assert (answer.status, answer.replayed) == (200, False)
    assert "Idempotent-Replayed: false" in response.content.decode()
    assert_paid_once(order, user, wallet)


def test_the_same_pay_form_sent_again_is_replayed_not_charged(web, order, user, wallet):
    key = pay_key(web.get(f"/orders/{order.number}/"))
    pay(web, order, key)

    again = pay(web, order, key)

    assert (again.context["answer"].status, again.context["answer"].replayed) == (200, True)
    assert "Idempotent-Replayed: true" in again.content.decode()
    assert_paid_once(order, user, wallet)


def test_the_script_gets_the_answer_as_json(web, order, user, wallet):
    key = pay_key(web.get(f"/orders/{order.number}/"))

    first = pay(web, order, key, Accept="application/json").json()
    second = pay(web, order, key, Accept="application/json").json()

    assert first["status"] == 200
    assert first["replayed"] is False
    assert first["order_status"] == "PAID"
    assert second["replayed"] is True
    assert second["retry_same_key"] is False
    assert_paid_once(order, user, wallet)


def test_a_page_key_replays_through_the_api_too(web, order, client):
    key = pay_key(web.get(f"/orders/{order.number}/"))
    pay(web, order, key)

    response = client.post(
        f"/api/v1/orders/{order.number}/pay/", format="json", headers={"Idempotency-Key": key}
    )

    assert response.status_code == 200
    assert response["Idempotent-Replayed"] == "true"
    assert Payment.objects.count() == 1


def test_a_tampered_key_gets_a_clear_message_and_nothing_is_stored(web, order):
    response = pay(web, order, "not a key!")

    answer = response.context["answer"]
    assert (answer.status, answer.code) == (400, "idempotency-key-invalid")
    assert "The key was altered" in response.content.decode()
    assert not IdempotencyKey.objects.filter(resource_type="payment").exists()
    assert Payment.objects.count() == 0


def test_a_provider_timeout_shows_unknown_and_the_same_key_resumes(
    web, order, user, wallet, fault, settings
):
    # Given a provider that charges, then answers after the shop stopped waiting
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", delay_s=1.5)
    key = pay_key(web.get(f"/orders/{order.number}/"))

    # When the person pays
    unknown = pay(web, order, key)

    # Then the page says "unknown, retrying with the same key" and offers exactly that
    answer = unknown.context["answer"]
    assert (answer.status, answer.code, answer.retry_same_key) == (
        503,
        "payment-outcome-unknown",
        True,
    )
    assert "Retrying with the same key" in unknown.content.decode()
    assert pay_key(unknown) == key
    assert unknown.context["retrying"] is True
    assert IdempotencyKey.objects.get(key=key).recovery_point == PayPoint.PAYMENT_CREATED
    # And the same key, sent again, settles it once
    resumed = pay(web, order, key)
    assert resumed.context["answer"].status == 200
    assert_paid_once(order, user, wallet)


def test_the_timeline_shows_the_whole_story_of_the_order(web, order, fault):
    fault("callback_duplicates", copies=2)
    key = pay_key(web.get(f"/orders/{order.number}/"))
    pay(web, order, key)
    payment = Payment.objects.get()
    BackgroundWork().once()  # what the worker does: deliver the notifications, ship

    page = web.get(f"/orders/{order.number}/").content.decode()

    assert f"Order {order.number} created" in page
    assert "Checkout: recovery point &#x27;finished&#x27;, answer 201 stored" in page
    assert f"attempt {payment.out_trade_no} committed as PENDING" in page
    assert "Pay: recovery point &#x27;finished&#x27;, answer 200 stored" in page
    assert "Payment SUCCEEDED by the pay request" in page
    # two copies, one notify_id, one row; told by what the stored outcome means (the
    # pay answer settled the payment first), never as the enum's "duplicate"
    assert page.count("received: the payment was already settled the same way") == 1
    assert "duplicate" not in page.split('id="timeline"')[1]
    assert "Shipped" in page
    # The same page in Chinese: the outcome in words, no English enum value
    chinese = web.get(f"/orders/{order.number}/", headers={"accept-language": "zh-hans"})
    assert "支付早已按同样的结果结清" in chinese.content.decode()
    assert "duplicate" not in chinese.content.decode().split('id="timeline"')[1]


def test_a_reload_keeps_every_answer_and_the_timeline_tells_the_unknown_and_the_query(
    web, order, fault, settings
):
    # Given a provider that charges, then answers after the shop stopped waiting
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", delay_s=1.5)
    key = pay_key(web.get(f"/orders/{order.number}/"))
    payment_label = {"idempotency_key": key, "click": "1"}
    web.post(f"/orders/{order.number}/pay/", payment_label)  # 503: outcome unknown
    out_trade_no = Payment.objects.get().out_trade_no

    # When the same key is retried, then the page is reloaded
    web.post(f"/orders/{order.number}/pay/", {**payment_label, "retry": "1"})
    reloaded = web.get(f"/orders/{order.number}/")

    # Then both answers are still there, badged for what they were
    answers = reloaded.context["answers"]
    assert [(a.label, a.status, a.freshness) for a in answers] == [
        ("Click 1", 503, "not stored"),
        ("Click 1 (retry 1, same key)", 200, "fresh"),
    ]
    page = reloaded.content.decode()
    assert page.count("not stored · nothing was kept for this key") == 1
    # And the timeline has the 503 and the retry's query to the provider
    assert "Click 1: answered 503 payment-outcome-unknown (not stored)" in page
    assert "the key stays at &#x27;payment_created&#x27; with no answer stored" in page
    assert f"asked the provider about the attempt (query {out_trade_no})" in page


def test_a_409_in_flight_is_kept_and_badged_not_stored(web, order, user):
    # Given a pay request under this key that is still running (its record is locked)
    key = pay_record_plant(user, order, point=PayPoint.STARTED, locked=True)

    # When the page sends the same key (a second click)
    answer = pay(web, order, key).context["answer"]
    reloaded = web.get(f"/orders/{order.number}/").content.decode()

    # Then it is a 409 that nothing stored, and a reload still shows it
    assert (answer.status, answer.freshness) == (409, "not stored")
    assert "Pay: answered 409 idempotency-key-in-use (not stored)" in reloaded
    assert "fresh · Idempotent-Replayed: false" not in reloaded


def test_a_stale_session_gets_words_not_a_traceback(order):
    anonymous = Client()

    script = anonymous.post(
        f"/orders/{order.number}/pay/",
        {"idempotency_key": new_key()},
        HTTP_ACCEPT="application/json",
    )
    form = anonymous.post(f"/orders/{order.number}/pay/", {"idempotency_key": new_key()})

    assert script.status_code == 401
    assert "session has ended" in script.json()["why"]
    assert form.status_code == 302
    assert form["Location"].startswith("/login/")
    assert Payment.objects.count() == 0


def test_the_pay_form_needs_a_csrf_token(order, user):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)

    response = strict.post(f"/orders/{order.number}/pay/", {"idempotency_key": new_key()})

    assert response.status_code == 403
    assert Payment.objects.count() == 0


# --- The refund button ---------------------------------------------------------------


def refund_on_page(web: Client, order: Order, key: str, amount: str = "") -> Any:
    return web.post(f"/orders/{order.number}/refund/", {"idempotency_key": key, "amount": amount})


def test_the_refund_button_refunds_once_and_the_same_form_again_is_replayed(
    web, order, user, wallet
):
    pay(web, order, pay_key(web.get(f"/orders/{order.number}/")))
    page = web.get(f"/orders/{order.number}/")
    assert 'id="refund-section"' in page.content.decode()
    key = str(page.context["refund_key"])

    first = refund_on_page(web, order, key, amount="1000")
    again = refund_on_page(web, order, key, amount="1000")

    assert (first.context["answer"].status, first.context["answer"].replayed) == (200, False)
    assert (again.context["answer"].status, again.context["answer"].replayed) == (200, True)
    assert_refunded_once(order, user, wallet, refunded=1000)
    rest = refund_on_page(web, order, str(again.context["refund_key"]))
    assert rest.context["answer"].status == 200
    assert_refunded_once(order, user, wallet, refunded=order.amount)
    page = rest.content.decode()
    assert 'id="refund-section"' not in page  # REFUNDED: nothing left
    assert page.count("Refund SUCCEEDED") == 2  # both on the timeline


def test_a_refund_amount_that_is_not_a_number_is_refused_in_words(web, order):
    pay(web, order, pay_key(web.get(f"/orders/{order.number}/")))

    response = refund_on_page(web, order, new_key(), amount="lots")

    assert response.context["answer"].status == 400
    assert not IdempotencyKey.objects.filter(path__endswith="/refunds/").exists()


def test_a_payment_the_provider_holds_for_the_customer_says_so_and_keeps_the_key(web, order, fault):
    # Given a provider that waits for the customer (3-D Secure)
    fault("requires_action")
    key = pay_key(web.get(f"/orders/{order.number}/"))

    # When the person pays
    waiting = pay(web, order, key)

    # Then the page says so, stores nothing, and offers the same key again
    answer = waiting.context["answer"]
    assert (answer.status, answer.code, answer.retry_same_key, answer.stored) == (
        202,
        "payment-action-required",
        True,
        False,
    )
    assert "confirm it at the provider" in waiting.content.decode()
    assert pay_key(waiting) == key
    assert IdempotencyKey.objects.get(key=key).recovery_point == PayPoint.PAYMENT_CREATED
    assert Order.objects.get(pk=order.pk).status == Order.Status.UNPAID
