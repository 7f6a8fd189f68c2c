"""The catalogue and order endpoints, and bad input on order creation."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from idempotency.models import IdempotencyKey
from orders.models import InventoryMovement, Order, Product
from tests.conftest import client_for, new_key
from tests.factories import ProductFactory, UserFactory

pytestmark = pytest.mark.django_db

PRODUCT = {"sku": "TEA-1", "name": "Tea", "price": 1999, "currency": "CNY", "stock": 5}


def assert_nothing_written() -> None:
    assert IdempotencyKey.objects.count() == 0
    assert Order.objects.count() == 0
    assert InventoryMovement.objects.filter(kind="RESERVE").count() == 0


# --- Catalogue ----------------------------------------------------------------------


def test_everyone_lists_products():
    ProductFactory.create(sku="A")

    response = client_for(None).get("/api/v1/products/")

    assert response.status_code == 200
    assert response.json()["results"] == [
        {
            "sku": "A",
            "name": Product.objects.get().name,
            "price": 1999,
            "currency": "CNY",
            "stock": 100,
        }
    ]


def test_staff_create_products_with_their_stock_recorded_as_received():
    staff = UserFactory.create(is_staff=True)

    response = client_for(staff).post("/api/v1/products/", PRODUCT, format="json")

    assert response.status_code == 201
    assert response.json() == PRODUCT
    movement = InventoryMovement.objects.get()
    assert (movement.kind, movement.quantity) == ("RECEIPT", 5)


def test_customers_cannot_create_products(client):
    response = client.post("/api/v1/products/", PRODUCT, format="json")

    assert response.status_code == 403
    assert response.json()["code"] == "permission-denied"
    assert Product.objects.count() == 0


def test_duplicate_sku_is_409():
    staff = client_for(UserFactory.create(is_staff=True))
    staff.post("/api/v1/products/", PRODUCT, format="json")

    response = staff.post("/api/v1/products/", PRODUCT, format="json")

    assert response.status_code == 409
    assert response.json()["code"] == "sku-exists"
    assert Product.objects.count() == 1


@pytest.mark.parametrize(
    "override",
    [
        {"price": -1},
        {"currency": "cny"},
        {"stock": -5},
        {"sku": ""},
        {"price": "cheap"},
    ],
)
def test_invalid_products_are_400(override):
    staff = client_for(UserFactory.create(is_staff=True))

    response = staff.post("/api/v1/products/", {**PRODUCT, **override}, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "validation-error"
    assert Product.objects.count() == 0


# --- Orders ---------------------------------------------------------------------------


def test_order_is_created_unpaid_at_current_prices_with_stock_reserved(create_order, product):
    response = create_order(key=new_key(), quantity=3)

    body = response.json()
    assert response.status_code == 201
    assert body["status"] == "UNPAID"
    assert body["amount"] == 3 * product.price
    assert body["currency"] == "CNY"
    assert body["lines"] == [{"sku": product.sku, "unit_price": product.price, "quantity": 3}]
    assert response["Location"] == f"/api/v1/orders/{body['number']}/"
    assert Product.objects.get(pk=product.pk).stock == product.stock - 3


def test_out_of_stock_on_any_line_reserves_nothing(client, product):
    scarce = ProductFactory.create(stock=1)

    response = client.post(
        "/api/v1/orders/",
        {
            "lines": [
                {"sku": product.sku, "quantity": 2},
                {"sku": scarce.sku, "quantity": 2},
            ]
        },
        format="json",
        headers={"Idempotency-Key": new_key()},
    )

    assert response.status_code == 409
    assert response.json()["code"] == "out-of-stock"
    assert Product.objects.get(pk=product.pk).stock == product.stock
    assert Product.objects.get(pk=scarce.pk).stock == 1
    assert InventoryMovement.objects.filter(kind="RESERVE").count() == 0


def test_own_orders_only(create_order, other_user):
    number = create_order(key=new_key()).json()["number"]
    stranger = client_for(other_user)

    assert stranger.get(f"/api/v1/orders/{number}/").status_code == 404
    assert stranger.get("/api/v1/orders/").json()["count"] == 0


def test_order_detail_and_paginated_list(client, create_order):
    numbers = [create_order(key=new_key()).json()["number"] for _ in range(3)]

    page = client.get("/api/v1/orders/?page_size=2").json()
    detail = client.get(f"/api/v1/orders/{numbers[0]}/")

    assert page["count"] == 3
    assert [order["number"] for order in page["results"]] == numbers[::-1][:2]
    assert page["next"] is not None
    assert detail.status_code == 200
    assert detail.json()["number"] == numbers[0]


def test_orders_need_authentication():
    assert client_for(None).get("/api/v1/orders/").status_code == 401


# --- Bad input: each a clear 4xx with a code, nothing written --------------------------


def test_malformed_json_is_400(client):
    response = client.post(
        "/api/v1/orders/",
        '{"lines": [',
        content_type="application/json",
        headers={"Idempotency-Key": new_key()},
    )

    assert response.status_code == 400
    assert response.json()["code"] == "malformed-json"
    assert_nothing_written()


@pytest.mark.parametrize(
    "line",
    [
        {"sku": 123, "quantity": 1.5},
        {"sku": ["x"], "quantity": 1},
        {"quantity": 1},
        {"sku": "A", "quantity": None},
        {"sku": "A", "quantity": 0},
        {"sku": "A", "quantity": -1},
        {"sku": "A", "quantity": 10**12},
    ],
)
def test_wrong_types_and_quantities_are_400(create_order, line):
    response = create_order(key=new_key(), body={"lines": [line]})

    assert response.status_code == 400
    assert response.json()["code"] == "validation-error"
    assert_nothing_written()


def test_too_many_lines_and_duplicate_skus_are_400(create_order, product):
    many = {"lines": [{"sku": f"S{i}", "quantity": 1} for i in range(51)]}
    twice = {"lines": [{"sku": product.sku, "quantity": 1}] * 2}

    for body in (many, twice):
        response = create_order(key=new_key(), body=body)
        assert response.status_code == 400
        assert response.json()["code"] == "validation-error"
    assert_nothing_written()


def test_unknown_sku_is_400_and_not_stored(create_order):
    response = create_order(key=new_key(), sku="NO-SUCH-THING")

    assert response.status_code == 400
    assert response.json()["code"] == "unknown-sku"
    assert response.json()["skus"] == ["NO-SUCH-THING"]
    assert_nothing_written()


def test_mixed_currencies_are_400(client, product):
    dollars = ProductFactory.create(currency="USD")

    response = client.post(
        "/api/v1/orders/",
        {
            "lines": [
                {"sku": product.sku, "quantity": 1},
                {"sku": dollars.sku, "quantity": 1},
            ]
        },
        format="json",
        headers={"Idempotency-Key": new_key()},
    )

    assert response.status_code == 400
    assert response.json()["code"] == "mixed-currencies"
    assert_nothing_written()


@pytest.mark.parametrize(
    ("price", "quantity"),
    [
        (0, 1),  # nothing to charge: no provider takes a charge of 0
        (10**12, 2),  # above ORDER_MAX_AMOUNT (the sandbox's per-charge maximum)
    ],
)
def test_an_amount_the_provider_can_never_accept_is_400_and_not_stored(
    create_order, price, quantity
):
    product = ProductFactory.create(price=price, stock=10)

    response = create_order(key=new_key(), sku=product.sku, quantity=quantity)

    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == "order-amount-out-of-range"
    assert (body["amount"], body["min_amount"], body["max_amount"]) == (price * quantity, 1, 10**12)
    assert_nothing_written()
    assert Product.objects.get(pk=product.pk).stock == 10


def test_the_amount_limit_is_a_setting(create_order, settings):
    settings.ORDER_MAX_AMOUNT = 5000
    product = ProductFactory.create(price=2500, stock=10)

    assert create_order(key=new_key(), sku=product.sku, quantity=2).status_code == 201
    refused = create_order(key=new_key(), sku=product.sku, quantity=3)

    assert refused.status_code == 400
    assert refused.json()["code"] == "order-amount-out-of-range"


def test_body_over_the_size_limit_is_413(client, settings):
    padding = "x" * (settings.API_MAX_BODY_BYTES + 1)

    response = client.post(
        "/api/v1/orders/",
        {"lines": [], "padding": padding},
        format="json",
        headers={"Idempotency-Key": new_key()},
    )

    assert response.status_code == 413
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "payload-too-large"
    assert_nothing_written()


def test_header_over_255_characters_and_non_ascii_key_are_400(create_order):
    for key in ("k" * 256, "clé-unique"):
        response = create_order(key=key)
        assert response.status_code == 400
        assert response.json()["code"] == "idempotency-key-invalid"
    assert_nothing_written()


# --- Query budget ----------------------------------------------------------------------

# First-time creation of a one-line order, as production runs it (the request's
# transactions are real, not savepoints of a test transaction): authentication
# and the key lookup in one statement (fastpaths/replay.py), then (BEGIN)
# product lookup, order_create's savepoint (SAVEPOINT, RELEASE: it turns a reused
# key into its own error), the open-orders cap
# (MAX_OPEN_ORDERS_PER_USER: the user's advisory lock, then the count under it),
# order, line, movement, stock, and the key record inserted with its answer
# (COMMIT is not captured). The key layer's share is the lookup (joined to the
# token's) and the INSERT.
ORDER_CREATE_QUERIES = 13
KEY_TABLE = '"idempotency_idempotencykey"'


@pytest.mark.django_db(transaction=True)
def test_order_creation_query_count_does_not_creep(create_order, client):
    create_order(key=new_key())  # warm the connection

    with CaptureQueriesContext(connection) as first:
        create_order(key=(key := new_key()))
    with CaptureQueriesContext(connection) as replay:
        create_order(key=key)

    print(f"order create: {len(first)} queries; replay: {len(replay)} queries")
    assert len(first) == ORDER_CREATE_QUERIES, [q["sql"] for q in first]
    key_statements = [q["sql"] for q in first if KEY_TABLE in q["sql"]]
    assert [sql.split()[0] for sql in key_statements] == ["SELECT", "INSERT"]
    # Replay: the token and the record in one statement, nothing else.
    assert len(replay) == 1, [q["sql"] for q in replay]
    assert '"authtoken_token"' in replay[0]["sql"]
    assert KEY_TABLE in replay[0]["sql"]
