"""The checkout behind the entry gate (docs/design.md, "Background work").

The form carries a one-time token the server issued (SET NX EX); submitting
consumes it (GETDEL) and uses it as the order's Idempotency-Key. A second
submit of the same form gets the first answer back, never a second order.
"""

from typing import Any

import pytest
from django.test import Client

from demo.shop import services
from demo.shop.forms import CheckoutForm
from demo.shop.services import (
    CHECKOUT_TOKEN_TTL_S,
    TokenState,
    checkout_token_consume,
    checkout_token_issue,
)
from idempotency.models import IdempotencyKey
from orders.models import InventoryMovement, Order
from tests.concurrency.helpers import run_at_once
from tests.conftest import client_for
from tests.factories import ProductFactory

pytestmark = pytest.mark.django_db


def form_token(response: Any) -> str:
    form: CheckoutForm = response.context["form"]
    return str(form["checkout_token"].value())


def session_key(web: Client) -> str:
    return web.session.session_key or ""


def token_key(web: Client, token: str) -> str:
    return f"checkout-token:{session_key(web)}:{token}"


def submit(web: Client, product: Any, token: str, quantity: int = 1) -> Any:
    return web.post("/checkout/", {"checkout_token": token, f"qty-{product.sku}": str(quantity)})


def test_the_form_carries_a_server_issued_token_that_expires(web, user, product, redis_client):
    token = form_token(web.get("/"))

    key = token_key(web, token)
    assert len(token) == 43  # 32 random bytes, URL-safe base64
    assert redis_client.get(key) == str(user.pk).encode()
    assert 0 < redis_client.ttl(key) <= CHECKOUT_TOKEN_TTL_S  # SET ... NX EX: never immortal


def test_each_rendering_is_a_new_checkout_intent_with_a_new_token(web, product):
    assert form_token(web.get("/")) != form_token(web.get("/"))


def test_submitting_makes_the_order_with_the_token_as_its_key(web, user, product, redis_client):
    token = form_token(web.get("/"))

    response = submit(web, product, token, quantity=2)

    order = Order.objects.get()
    answer = response.context["answer"]
    assert (answer.status, answer.replayed) == (201, False)
    assert order.user == user
    assert order.idempotency_key == token
    assert order.lines.get().quantity == 2
    assert redis_client.exists(token_key(web, token)) == 0  # consumed
    assert "HTTP 201" in response.content.decode()
    assert "Idempotent-Replayed: false" in response.content.decode()


def test_a_second_submit_of_the_same_form_gets_the_first_answer_not_a_second_order(web, product):
    token = form_token(web.get("/"))
    first = submit(web, product, token)

    again = [submit(web, product, token) for _ in range(2)]  # double click, then a reload

    assert Order.objects.count() == 1
    assert InventoryMovement.objects.filter(kind="RESERVE").count() == 1
    for response in again:
        answer = response.context["answer"]
        assert (answer.status, answer.replayed) == (201, True)
        assert answer.body == first.context["answer"].body
        assert "Idempotent-Replayed: true" in response.content.decode()


def test_a_reload_long_after_still_gets_the_first_answer(web, product, redis_client):
    token = form_token(web.get("/"))
    submit(web, product, token)
    redis_client.delete(f"checkout-token-used:{session_key(web)}:{token}")  # receipt expired

    response = submit(web, product, token)

    answer = response.context["answer"]
    assert (answer.status, answer.replayed) == (201, True)  # the key's record still answers
    assert Order.objects.count() == 1


def test_the_same_form_resent_with_other_items_is_a_mismatch_and_changes_nothing(web, product):
    token = form_token(web.get("/"))
    submit(web, product, token, quantity=1)

    response = submit(web, product, token, quantity=3)

    assert response.context["answer"].code == "idempotency-key-mismatch"
    assert Order.objects.get().lines.get().quantity == 1


def test_a_forged_token_gets_a_clear_message_and_nothing_is_stored(web, product):
    web.get("/")
    forged = "A" * 43

    response = submit(web, product, forged)

    answer = response.context["answer"]
    assert answer.code == "checkout-token-invalid"
    assert "expired or was not issued to you" in response.content.decode()
    assert Order.objects.count() == 0
    assert not IdempotencyKey.objects.exists()


def test_an_expired_token_gets_the_same_clear_message(web, product, redis_client):
    token = form_token(web.get("/"))
    redis_client.delete(token_key(web, token))  # what EX does after 30 minutes

    response = submit(web, product, token)

    assert response.context["answer"].code == "checkout-token-invalid"
    assert Order.objects.count() == 0


def test_a_form_from_before_logging_in_again_is_stale_and_refused(web, web_for, user, product):
    token = form_token(web.get("/"))
    fresh_login = web_for(user)  # a new session: the token was tied to the old one

    response = submit(fresh_login, product, token)

    assert response.context["answer"].code == "checkout-token-invalid"
    assert Order.objects.count() == 0


def test_another_users_token_is_not_honoured(web, web_for, other_user, product):
    token = form_token(web.get("/"))

    response = submit(web_for(other_user), product, token)

    assert response.context["answer"].code == "checkout-token-invalid"
    assert Order.objects.count() == 0


def test_an_altered_token_is_refused_before_anything_is_attempted(web, product, redis_client):
    token = form_token(web.get("/"))

    response = submit(web, product, token + "!")

    assert response.context["answer"].code == "checkout-token-invalid"
    assert "altered" in response.context["answer"].detail
    assert Order.objects.count() == 0
    assert redis_client.exists(token_key(web, token)) == 1  # the real token is untouched


def test_field_errors_are_next_to_the_field_and_the_token_stays_valid(web, product, redis_client):
    token = form_token(web.get("/"))

    response = submit(web, product, token, quantity=-1)

    page = response.content.decode()
    field_id = f"id_qty-{product.sku}"
    assert f'id="{field_id}-error"' in page
    assert f'aria-describedby="{field_id}-error"' in page
    assert "greater than or equal to 0" in page
    assert redis_client.exists(token_key(web, token)) == 1
    assert Order.objects.count() == 0
    # The corrected form still goes through, once.
    assert submit(web, product, token, quantity=1).context["answer"].status == 201


def test_choosing_nothing_is_said_at_the_top_of_the_form(web, product):
    token = form_token(web.get("/"))

    response = submit(web, product, token, quantity=0)

    assert "Choose at least one item" in response.content.decode()
    assert Order.objects.count() == 0


def test_out_of_stock_is_the_tokens_stored_answer_and_a_fresh_form_follows(web, product):
    token = form_token(web.get("/"))

    response = submit(web, product, token, quantity=product.stock + 1)
    replay = submit(web, product, token, quantity=product.stock + 1)

    assert response.context["answer"].code == "out-of-stock"
    assert (replay.context["answer"].code, replay.context["answer"].replayed) == (
        "out-of-stock",
        True,
    )
    assert form_token(response) != token  # the spent token is not offered again
    assert Order.objects.count() == 0


def test_the_checkout_needs_a_csrf_token(user, product):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    token = form_token(strict.get("/"))

    response = strict.post("/checkout/", {"checkout_token": token, f"qty-{product.sku}": "1"})

    assert response.status_code == 403
    assert Order.objects.count() == 0


def test_an_anonymous_checkout_goes_to_the_login_page(product):
    response = Client().post("/checkout/", {f"qty-{product.sku}": "1"})

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_the_catalogue_shows_live_stock(web, product):
    page = web.get("/").content.decode()
    stock = web.get("/stock/live/").json()

    assert f'data-stock-sku="{product.sku}">{product.stock}<' in page
    assert stock == {"stock": {product.sku: product.stock}}


def test_the_page_key_is_the_apis_key_too(web, user, product):
    # Same method, route and body as the API: the page's order replays there.
    token = form_token(web.get("/"))
    submit(web, product, token, quantity=1)

    response = client_for(user).post(
        "/api/v1/orders/",
        {"lines": [{"sku": product.sku, "quantity": 1}]},
        format="json",
        headers={"Idempotency-Key": token},
    )

    assert response.status_code == 201
    assert response["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1


def test_token_consumption_is_atomic_only_one_of_many_takes_it(user):
    session = "race-session"
    token = checkout_token_issue(session_key=session, user_id=user.pk)

    taken = run_at_once(
        16, lambda _: checkout_token_consume(session_key=session, user_id=user.pk, token=token)
    )

    assert taken.count(TokenState.TAKEN) == 1
    assert taken.count(TokenState.ALREADY_TAKEN) == 15


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_submits_at_once_make_one_order_and_both_get_its_answer(user):
    # Given one issued token and a basket
    product = ProductFactory.create(stock=5)
    session = "double-submit"
    token = checkout_token_issue(session_key=session, user_id=user.pk)
    lines = [services.LineRequest(sku=product.sku, quantity=1)]

    # When two submits of the same form race (one takes the token, one finds it gone)
    answers = run_at_once(
        2,
        lambda _: services.checkout_submit(
            user_id=user.pk, session_key=session, token=token, lines=lines
        ),
    )

    # Then one order, and the loser waited for the winner and got its answer replayed
    assert Order.objects.count() == 1
    assert sorted((a.status, a.replayed) for a in answers) == [(201, False), (201, True)]
