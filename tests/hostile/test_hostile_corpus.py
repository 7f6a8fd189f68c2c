"""A fixed corpus of nasty inputs (tests/hostile/corpus.py), for what the OpenAPI schema
(and so Schemathesis) does not cover: the signed callback, the sandbox's API, the
token endpoint, the demo shop's forms, and HTTP framing everywhere.

Every case is answered below 500; the API, callback and sandbox cases with a 4xx
problem+json and a ``code``; the pages with their own 4xx or the form again with
its errors. And nothing is written: every table a request could touch has the
same row count afterwards.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import models
from django.test import Client

from callbacks.models import ProviderNotification
from demo.sandbox.models import Charge, Fault, Wallet
from edge.errors import PROBLEM_CONTENT_TYPE
from idempotency.models import IdempotencyKey
from orders.models import Order, Product
from payments.models import LedgerEntry, Payment
from payments.providers.sandbox import sign
from payments.services import payment_create
from tests.conftest import new_key
from tests.factories import UserFactory
from tests.hostile.cases import Case
from tests.hostile.corpus import CASES

TABLES: list[type[models.Model]] = [
    Order,
    IdempotencyKey,
    Payment,
    LedgerEntry,
    ProviderNotification,
]
TABLES += [Charge, Wallet, Fault, Product]


@pytest.fixture
def payment(create_order: Any, user: User) -> Payment:
    number = create_order(key=new_key(), quantity=2).json()["number"]
    return payment_create(user_id=user.pk, order_number=number)


def client_as(who: str, user: User) -> Client:
    client = Client()
    if who == "customer":
        client.defaults["HTTP_AUTHORIZATION"] = f"Token {user.auth_token.key}"
    elif who == "staff":
        staff = UserFactory.create(is_staff=True)
        client.defaults["HTTP_AUTHORIZATION"] = f"Token {staff.auth_token.key}"
    elif who == "merchant":
        client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {settings.PROVIDER_API_KEY}"
    elif who == "web":
        client.force_login(user)
    return client


def fill(case: Case, values: dict[str, str]) -> tuple[str, bytes]:
    path, body = case.path, case.body
    for name, value in values.items():
        placeholder = "{" + name + "}"
        path = path.replace(placeholder, value)
        body = body.replace(placeholder.encode(), value.encode())
    return path, body


def environ_extra(case: Case, body: bytes) -> tuple[dict[str, str], dict[str, Any]]:
    """(headers, WSGI environ entries) for the case: signature, cookie, chunked framing."""
    # As a WSGI server hands them over: the header's bytes (UTF-8 here) read as Latin-1.
    headers = {name: value.encode().decode("latin-1") for name, value in case.headers.items()}
    extra: dict[str, Any] = {}
    if case.who == "provider":
        stamp, secret = int(time.time()), settings.SANDBOX_WEBHOOK_SECRET.split(",")[0]
        signature = sign(secret=secret, timestamp=stamp, raw_body=body)
        headers["Sandbox-Signature"] = f"t={stamp},v1={signature}"
    if "Cookie" in headers:
        extra["HTTP_COOKIE"] = headers.pop("Cookie")
    if case.chunked:  # the test client always declares a length: take it away
        extra |= {"CONTENT_LENGTH": "", "HTTP_TRANSFER_ENCODING": "chunked"}
    return headers, extra


def counts() -> dict[str, int]:
    return {model.__name__: model._default_manager.count() for model in TABLES}


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_input_is_answered_below_500_and_writes_nothing(name, user, payment, product):
    case = CASES[name]
    values = {"sku": product.sku, "out_trade_no": payment.out_trade_no}
    values["number"] = payment.order.number
    path, body = fill(case, values)
    headers, extra = environ_extra(case, body)
    client = client_as(case.who, user)
    before = counts()

    response = client.generic(
        case.method, path, body, content_type=case.content_type, headers=headers, **extra
    )

    assert response.status_code < 500, response.content[:300]
    if case.status is not None:
        assert response.status_code == case.status, response.content[:300]
    if case.code is not None:
        assert response["Content-Type"] == PROBLEM_CONTENT_TYPE
        assert response.json()["code"] == case.code
    assert counts() == before
