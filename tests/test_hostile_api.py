"""Issue 11: what a client can send the shop API and the sandbox is a 4xx with a code.

Each case here was a 500 once: a body the JSON decoder or the fingerprint could
not handle, or a reference in a path that PostgreSQL could not even compare.
"""

import json
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from demo.sandbox.models import Charge, Wallet
from edge.strictjson import MAX_JSON_DEPTH
from idempotency.models import IdempotencyKey
from orders.models import Order, Product
from tests.conftest import new_key

DEEP = b"[" * 30_000 + b"]" * 30_000
JUST_TOO_DEEP = b'{"lines": ' + b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH + b"}"


def post_raw(api: APIClient, path: str, raw: bytes, *, key: bool = True) -> Any:
    headers = {"Idempotency-Key": new_key()} if key else {}
    # Raw bytes on purpose: the stubs say str, Django takes both.
    body: Any = raw
    return api.generic("POST", path, body, content_type="application/json", headers=headers)


def assert_problem(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == code


def assert_nothing_written() -> None:
    assert Order.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0


def lines_with(product: Product, extra: str = "") -> bytes:
    return f'{{"lines": [{{"sku": "{product.sku}", "quantity": 1}}]{extra}}}'.encode()


@pytest.fixture
def merchant() -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {settings.PROVIDER_API_KEY}")
    return api


# --- Bodies -------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity", "-Infinity"])
def test_a_non_finite_number_in_an_ignored_field_is_400(client, product, number):
    response = post_raw(client, "/api/v1/orders/", lines_with(product, f', "note": {number}'))

    assert_problem(response, 400, "json-number-not-finite")
    assert_nothing_written()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"lines": [{"sku": "\\ud800", "quantity": 1}]}', id="in-a-value"),
        pytest.param(b'{"\\udfff": 1, "lines": []}', id="in-an-object-key"),
        pytest.param(b'{"lines": [], "x": "\\udbff\\u0041"}', id="high-surrogate-then-letter"),
    ],
)
def test_a_lone_surrogate_in_the_body_is_400(client, raw):
    response = post_raw(client, "/api/v1/orders/", raw)

    assert_problem(response, 400, "malformed-json")
    assert_nothing_written()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"lines": [], "x": "\xff"}', id="bad-utf-8"),
        pytest.param('{"lines": []}'.encode("utf-16"), id="utf-16"),
        pytest.param('{"lines": []}'.encode("utf-32"), id="utf-32"),
        pytest.param(b'{"lines": [], "n": 1' + b"0" * 5000 + b"}", id="int-beyond-4300-digits"),
    ],
)
def test_a_body_that_is_not_utf8_json_is_400(client, raw):
    response = post_raw(client, "/api/v1/orders/", raw)

    assert_problem(response, 400, "malformed-json")
    assert_nothing_written()


def _endpoints(order: Order) -> list[tuple[str, str]]:
    """(who, path) of every endpoint that parses a JSON body."""
    return [
        ("customer", "/api/v1/orders/"),
        ("customer", f"/api/v1/orders/{order.number}/pay/"),
        ("customer", f"/api/v1/orders/{order.number}/cancel/"),
        ("staff", "/api/v1/products/"),
        ("anonymous", "/api/v1/auth/token/"),
        ("merchant", "/sandbox/v1/charges"),
        ("staff", "/sandbox/v1/faults"),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("raw", [DEEP, JUST_TOO_DEEP], ids=["30000-deep", "just-too-deep"])
def test_deeply_nested_json_is_400_on_every_json_endpoint(client, staff, merchant, order, raw):
    callers = {"customer": client, "staff": staff, "anonymous": APIClient(), "merchant": merchant}
    orders_before = Order.objects.count()
    keys_before = IdempotencyKey.objects.count()

    for who, path in _endpoints(order):
        response = post_raw(callers[who], path, raw)
        assert_problem(response, 400, "json-too-deep")

    assert Order.objects.count() == orders_before
    assert IdempotencyKey.objects.count() == keys_before
    assert Charge.objects.count() == 0


@pytest.mark.django_db
def test_nesting_at_the_bound_is_still_parsed(client):
    raw = b'{"lines": ' + b"[" * (MAX_JSON_DEPTH - 1) + b"]" * (MAX_JSON_DEPTH - 1) + b"}"

    response = post_raw(client, "/api/v1/orders/", raw)

    assert_problem(response, 400, "validation-error")  # parsed, then refused by the serializer


# --- References in paths --------------------------------------------------------------

REFERENCES = [
    pytest.param("%00", id="nul"),
    pytest.param("A%00B", id="nul-inside"),
    # Not UTF-8: Django keeps it percent-encoded, so the reference is that text.
    pytest.param("%ED%A0%80", id="utf8-encoded-surrogate"),
    pytest.param("X" * 300, id="overlong"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("ref", REFERENCES)
def test_an_odd_order_number_in_a_path_is_404(client, ref):
    assert_problem(client.get(f"/api/v1/orders/{ref}/"), 404, "not-found")


@pytest.mark.django_db
@pytest.mark.parametrize("ref", REFERENCES)
def test_an_odd_idempotency_key_in_a_path_is_404(client, ref):
    assert_problem(client.get(f"/api/v1/idempotency-keys/{ref}/"), 404, "not-found")


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["pay", "cancel"])
@pytest.mark.parametrize("ref", REFERENCES)
def test_pay_or_cancel_on_an_odd_order_number_is_404_and_stores_no_key(client, action, ref):
    response = client.post(
        f"/api/v1/orders/{ref}/{action}/", {}, format="json", headers={"Idempotency-Key": new_key()}
    )

    assert_problem(response, 404, "not-found")
    assert IdempotencyKey.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("ref", REFERENCES)
def test_the_sandbox_answers_404_for_an_odd_charge_reference(merchant, ref):
    assert_problem(merchant.get(f"/sandbox/v1/charges/{ref}"), 404, "charge-not-found")


@pytest.mark.django_db
@pytest.mark.parametrize("ref", REFERENCES)
def test_the_sandbox_answers_404_for_an_odd_refund_reference(merchant, ref):
    assert_problem(merchant.get(f"/sandbox/v1/refunds/{ref}"), 404, "refund-not-found")


@pytest.mark.django_db
@pytest.mark.parametrize("ref", REFERENCES)
def test_the_sandbox_answers_404_for_an_odd_wallet(merchant, ref):
    assert_problem(merchant.get(f"/sandbox/v1/wallets/{ref}"), 404, "wallet-not-found")
    assert Wallet.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    "ref",
    [
        pytest.param("%00", id="nul"),
        pytest.param("A%00B", id="nul-inside"),
        pytest.param("R" * 65, id="65-characters"),
        pytest.param("X" * 300, id="overlong"),
    ],
)
def test_the_sandbox_refuses_to_close_a_reference_no_charge_can_have(merchant, ref):
    response = merchant.post(f"/sandbox/v1/charges/{ref}/close")

    assert_problem(response, 404, "charge-not-found")
    assert Charge.objects.count() == 0


@pytest.mark.django_db
def test_a_64_character_reference_can_still_be_closed(merchant):
    response = merchant.post(f"/sandbox/v1/charges/{'R' * 64}/close")

    assert response.status_code == 200
    assert Charge.objects.get().status == "CLOSED"


@pytest.mark.django_db
def test_a_nul_in_a_token_is_401_not_a_500(product):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION="Token abc\u0000def")

    assert_problem(api.get("/api/v1/orders/"), 401, "not-authenticated")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "code"), [("tea\u0000", "validation-error"), ("tea\ud800", "malformed-json")]
)
def test_a_staff_product_with_nul_or_surrogate_is_400(staff, name, code):
    body = {"sku": "S1", "name": name, "price": 1, "currency": "CNY", "stock": 1}

    response = post_raw(staff, "/api/v1/products/", json.dumps(body).encode(), key=False)

    assert_problem(response, 400, code)
    assert Product.objects.count() == 0
