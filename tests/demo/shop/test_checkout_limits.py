"""Checkout tokens: issued only for a form with something to buy, and at most
CHECKOUT_TOKENS_PER_SESSION live per session (the oldest is evicted)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from orders.models import Order
from tests.demo.shop.test_checkout import form_token, session_key, submit

pytestmark = pytest.mark.django_db


def live_tokens(redis_client: Any, web: Client) -> int:
    return sum(1 for _ in redis_client.scan_iter(f"checkout-token:{session_key(web)}:*"))


def test_no_token_is_written_when_there_is_nothing_to_buy(web, redis_client, product):
    product.stock = 0
    product.save()

    response = web.get("/")

    assert response.context["form"] is None
    assert live_tokens(redis_client, web) == 0


def test_no_token_is_written_for_a_visitor(product, redis_client):
    response = Client().get("/")

    assert response.status_code == 200
    assert response.context["form"] is None


def test_a_session_holds_at_most_the_cap_and_the_oldest_form_is_refused(
    web, user, settings, redis_client, product
):
    settings.CHECKOUT_TOKENS_PER_SESSION = 3
    tokens = [form_token(web.get("/")) for _ in range(5)]

    assert live_tokens(redis_client, web) == 3
    oldest = submit(web, product, tokens[0])
    newest = submit(web, product, tokens[-1])

    assert oldest.context["answer"].code == "checkout-token-invalid"
    assert newest.status_code == 200
    assert Order.objects.filter(user=user).count() == 1
