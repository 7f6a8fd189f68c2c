"""The sandbox's merchant API: charges, replays, dedupe, query, wallets, auth."""

import json
import re

import pytest
from django.conf import settings
from django.test import Client
from rest_framework.test import APIClient
from rest_framework.throttling import UserRateThrottle

from demo.sandbox.errors import (
    ChargeNotFound,
    IdempotencyKeyInvalid,
    IdempotencyKeyMismatch,
    IdempotencyKeyMissing,
    MerchantUnauthorized,
    OutTradeNoMismatch,
    WalletNotFound,
)
from demo.sandbox.models import Charge, IdempotencyRecord, Notification, Wallet
from demo.sandbox.services import DECLINE_INSUFFICIENT_FUNDS
from tests.conftest import client_for
from tests.demo.sandbox.conftest import CHARGES, charge_body, merchant_client
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

START = settings.SANDBOX_WALLET_START
CHARGE_FIELDS = {
    "trade_no",
    "out_trade_no",
    "status",
    "amount",
    "currency",
    "payer",
    "paid_at",
    "decline_reason",
}


def wallet(payer: str = "alice") -> Wallet:
    return Wallet.objects.get(payer=payer)


def assert_nothing_charged() -> None:
    assert Charge.objects.count() == 0
    assert IdempotencyRecord.objects.count() == 0
    assert Wallet.objects.count() == 0


# --- Charge -------------------------------------------------------------------------


def test_charge_succeeds_and_debits_the_wallet_once(charge):
    body = charge_body(amount=1999)

    response = charge(body)

    assert response.status_code == 200
    assert response["Idempotent-Replayed"] == "false"
    data = response.json()
    assert set(data) == CHARGE_FIELDS
    assert data["status"] == "SUCCESS"
    assert re.fullmatch(r"T[0-9A-F]{20}", data["trade_no"])
    assert data["paid_at"] is not None
    assert data["decline_reason"] is None
    assert (data["out_trade_no"], data["amount"], data["currency"], data["payer"]) == (
        body["out_trade_no"],
        1999,
        "CNY",
        "alice",
    )
    assert wallet().balance == START - 1999
    assert wallet().charged_total == 1999
    assert Notification.objects.filter(charge__trade_no=data["trade_no"]).count() == 1


def test_same_key_same_body_replays_the_stored_answer(charge):
    body = charge_body()
    first = charge(body, key="k-replay")

    again = charge(body, key="k-replay")

    assert again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Charge.objects.count() == 1
    assert wallet().balance == START - body["amount"]


def test_key_order_and_whitespace_do_not_make_another_request(merchant):
    body = charge_body()
    merchant.post(CHARGES, body, format="json", headers={"Idempotency-Key": "k-order"})
    respelled = json.dumps(dict(reversed(body.items())), indent=4)

    again = merchant.post(
        CHARGES, respelled, content_type="application/json", headers={"Idempotency-Key": "k-order"}
    )

    assert again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"


def test_same_key_different_body_is_422_and_charges_nothing_more(charge):
    charge(charge_body(amount=100), key="k-mismatch")

    response = charge(charge_body(amount=200), key="k-mismatch")

    assert response.status_code == 422
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == IdempotencyKeyMismatch.code
    assert Charge.objects.count() == 1
    assert wallet().balance == START - 100


def test_new_key_same_out_trade_no_dedupes_onto_the_first_charge(charge):
    body = charge_body()
    first = charge(body, key="k-first")

    second = charge(body, key="k-second")

    assert second.status_code == 200
    assert second.json() == first.json()
    assert Charge.objects.count() == 1
    assert wallet().balance == START - body["amount"]  # one debit
    assert wallet().charged_total == body["amount"]
    # The new key is stored too: it now replays like any other.
    assert charge(body, key="k-second")["Idempotent-Replayed"] == "true"
    assert Notification.objects.count() == 1  # the dedupe notified nobody again


@pytest.mark.parametrize(
    "change", [{"amount": 2000}, {"currency": "USD"}, {"payer": "bob"}], ids=str
)
def test_same_out_trade_no_with_other_terms_is_422(charge, change):
    body = charge_body()
    charge(body)

    response = charge({**body, **change})

    assert response.status_code == 422
    assert response.json()["code"] == OutTradeNoMismatch.code
    assert Charge.objects.count() == 1
    assert IdempotencyRecord.objects.count() == 1  # the refused request stored nothing
    assert wallet().balance == START - body["amount"]
    assert not Wallet.objects.filter(payer="bob").exists()


def test_not_enough_balance_is_a_declined_charge_and_no_debit(charge):
    response = charge(charge_body(amount=START + 1))

    assert response.status_code == 200
    data = response.json()
    assert data["status"] == "DECLINED"
    assert data["decline_reason"] == DECLINE_INSUFFICIENT_FUNDS
    assert data["paid_at"] is None
    assert wallet().balance == START
    assert wallet().charged_total == 0
    # A decline is settled, so it is notified too.
    assert Notification.objects.get().payload["trade_status"] == "DECLINED"


def test_the_exact_balance_can_be_spent_and_then_nothing_more(charge):
    assert charge(charge_body(amount=START)).json()["status"] == "SUCCESS"

    after = charge(charge_body(amount=1))

    assert after.json()["decline_reason"] == DECLINE_INSUFFICIENT_FUNDS
    assert wallet().balance == 0
    assert wallet().charged_total == START


def test_charge_without_idempotency_key_is_400_and_not_stored(merchant):
    response = merchant.post(CHARGES, charge_body(), format="json")

    assert response.status_code == 400
    assert response.json()["code"] == IdempotencyKeyMissing.code
    assert_nothing_charged()


@pytest.mark.parametrize("key", ["", "has space", "x" * 256, "slash/inside", "ключ", '"quoted"'])
def test_charge_with_malformed_key_is_400_and_not_stored(charge, key):
    response = charge(charge_body(), key=key)

    assert response.status_code == 400
    assert response.json()["code"] == IdempotencyKeyInvalid.code
    assert_nothing_charged()


@pytest.mark.parametrize(
    "change",
    [
        {"amount": 0},
        {"amount": -5},
        {"amount": "1999"},
        {"amount": 19.99},
        {"amount": True},
        {"currency": "cny"},
        {"currency": "CNYX"},
        {"payer": ""},
        {"payer": "p" * 151},
        {"out_trade_no": ""},
        {"out_trade_no": "o" * 65},
        {"notify_url": "ftp://shop.example/cb"},
        {"notify_url": "not a url"},
        {"notify_url": "http://"},
    ],
    ids=str,
)
def test_charge_with_a_bad_body_is_400_validation_error(charge, change):
    response = charge(charge_body(**change))

    assert response.status_code == 400
    assert response.json()["code"] == "validation-error"
    assert_nothing_charged()


def test_notify_url_on_a_private_host_name_is_accepted_when_allowed(charge, settings):
    settings.SANDBOX_NOTIFY_URLS = ["http://web:8000/api/v1/"]

    response = charge(charge_body(notify_url="http://web:8000/api/v1/callbacks/sandbox/"))

    assert response.status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.7:6379/",  # anywhere else on the deployment's network
        "http://169.254.169.254/latest/meta-data/",
        "https://127.0.0.1:9/callbacks/sandbox/",  # another scheme
        "http://127.0.0.1:90/callbacks/sandbox/",  # a port with the allowed one as prefix
        "http://127.0.0.1:9@evil.example/callbacks/sandbox/",  # userinfo, then a host
        "http://127.0.0.1:9.evil.example/callbacks/sandbox/",
        "http://127.0.0.1:99999999/",  # not a port at all
    ],
)
def test_notify_url_outside_the_allow_list_is_400_and_nothing_charged(charge, url):
    response = charge(charge_body(notify_url=url))

    assert response.status_code == 400
    assert response.json()["code"] == "validation-error"
    assert "notify_url" in response.json()["errors"]
    assert_nothing_charged()


def test_the_allow_list_is_a_path_prefix(charge, settings):
    settings.SANDBOX_NOTIFY_URLS = ["http://shop:8000/api/v1/callbacks"]

    inside = charge(charge_body(notify_url="http://shop:8000/api/v1/callbacks/sandbox/"))
    beside = charge(charge_body(notify_url="http://shop:8000/api/v1/callbacks-evil/"))

    assert inside.status_code == 200
    assert beside.status_code == 400


def test_the_allow_list_defaults_to_the_shop_base_url(charge, settings):
    settings.SANDBOX_NOTIFY_URLS = []
    settings.SHOP_BASE_URL = "https://shop.example"

    own = charge(charge_body(notify_url="https://shop.example/api/v1/callbacks/sandbox/"))
    other = charge(charge_body(notify_url="http://127.0.0.1:9/callbacks/sandbox/"))

    assert own.status_code == 200
    assert other.status_code == 400


def test_missing_fields_are_400(charge):
    response = charge({"out_trade_no": "P-1"})

    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"amount", "currency", "payer", "notify_url"}


# --- Query and wallets ------------------------------------------------------------


def test_query_returns_the_charge(charge, merchant):
    created = charge(charge_body()).json()

    response = merchant.get(f"{CHARGES}/{created['out_trade_no']}")

    assert response.status_code == 200
    assert response.json() == created


def test_query_of_an_unknown_out_trade_no_is_404(merchant):
    response = merchant.get(f"{CHARGES}/P-never-sent")

    assert response.status_code == 404
    assert response.json()["code"] == ChargeNotFound.code


def test_an_out_trade_no_with_a_slash_can_still_be_queried(charge, merchant):
    created = charge(charge_body(out_trade_no="2024/P-7")).json()

    assert merchant.get(f"{CHARGES}/2024/P-7").json() == created


def test_wallet_shows_balance_charged_total_and_charges(charge, merchant):
    ok = charge(charge_body(amount=300)).json()
    declined = charge(charge_body(amount=START)).json()  # 300 already spent

    response = merchant.get("/sandbox/v1/wallets/alice")

    assert response.status_code == 200
    assert response.json() == {
        "payer": "alice",
        "balance": START - 300,
        "charged_total": 300,
        "refunded_total": 0,
        "disputed_total": 0,
        "charges": [ok, declined],
        "refunds": [],
        "disputes": [],
    }


def test_wallet_of_an_unknown_payer_is_404(merchant):
    response = merchant.get("/sandbox/v1/wallets/nobody")

    assert response.status_code == 404
    assert response.json()["code"] == WalletNotFound.code


# --- Merchant auth ------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer wrong-key", "Token {key}", "Basic {key}", "Bearer {key}x"],
)
def test_merchant_endpoints_refuse_anything_but_a_known_key(authorization):
    client = APIClient()
    if authorization is not None:
        key = settings.SANDBOX_API_KEYS[0]
        client.credentials(HTTP_AUTHORIZATION=authorization.format(key=key))

    answers = [
        client.post(CHARGES, charge_body(), format="json", headers={"Idempotency-Key": "k"}),
        client.get(f"{CHARGES}/P-1"),
        client.post(f"{CHARGES}/P-1/close"),
        client.get("/sandbox/v1/wallets/alice"),
    ]

    for response in answers:
        assert response.status_code == 401
        assert response.json()["code"] == MerchantUnauthorized.code
        assert response["WWW-Authenticate"].startswith("Bearer")
    assert_nothing_charged()


def test_the_shops_own_credentials_are_not_merchant_credentials():
    staff_user = UserFactory.create(is_staff=True, is_superuser=True)

    response = client_for(staff_user).get(f"{CHARGES}/P-1")

    assert response.status_code == 401
    assert response.json()["code"] == MerchantUnauthorized.code


def test_every_configured_key_is_accepted(settings):
    settings.SANDBOX_API_KEYS = ["old-key", "new-key"]

    for key in ("old-key", "new-key"):
        assert merchant_client(key).get(f"{CHARGES}/P-1").status_code == 404


def test_merchant_endpoints_are_not_throttled_by_the_shop(charge, monkeypatch):
    monkeypatch.setattr(UserRateThrottle, "rate", "1/hour", raising=False)

    statuses = {charge(charge_body()).status_code for _ in range(3)}

    assert statuses == {200}


BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.mark.parametrize("accept", [None, "*/*", "application/json"])
def test_the_index_is_json_for_a_program(accept):
    headers = {"accept": accept} if accept else {}
    index = Client(headers=headers).get("/sandbox/")

    assert index["Content-Type"] == "application/json"
    assert "POST /sandbox/v1/charges (Idempotency-Key)" in index.json()["endpoints"]


def test_the_index_is_a_page_for_a_browser():
    page = Client(headers={"accept": BROWSER_ACCEPT}).get("/sandbox/")

    assert page["Content-Type"].startswith("text/html")
    html = page.content.decode()
    assert "<h1>Sandbox provider</h1>" in html
    assert "<li><code>GET /sandbox/v1/wallets/{payer}</code></li>" in html
    assert '<a href="/admin/">' in html


def test_the_index_lists_every_route_the_sandbox_serves():
    # Each route of demo/sandbox/urls.py, its parameters (<path:payer>, {payer}) blurred
    # to {}: the index names them for a reader, the URLconf for Django.
    from demo.sandbox.urls import urlpatterns

    endpoints = Client().get("/sandbox/").json()["endpoints"]
    listed = {
        re.sub(r"\{[^}]*\}", "{}", word)
        for endpoint in endpoints
        for word in endpoint.split()
        if word.startswith("/sandbox/")
    }
    routes = {
        "/sandbox/" + re.sub(r"<[^>]*>", "{}", str(pattern.pattern))
        for pattern in urlpatterns
        if str(pattern.pattern)
    }

    assert routes - listed == set()
    assert any(e.startswith("GET /sandbox/v1/statements/{date}") for e in endpoints)
