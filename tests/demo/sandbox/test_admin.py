"""The provider's tables in the Django admin: visible to superusers, never editable."""

import pytest
from django.test import Client

from demo.sandbox.services import charge_close, charge_create, fault_set, refund_create
from tests.demo.sandbox.conftest import charge_body, refund_body
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

MODELS = ["wallet", "charge", "refund", "idempotencyrecord", "notification", "fault"]


@pytest.fixture
def admin_browser() -> Client:
    browser = Client()
    browser.force_login(UserFactory.create(is_staff=True, is_superuser=True))
    return browser


@pytest.mark.parametrize("model", MODELS)
def test_every_table_is_listed_and_read_only(admin_browser, model):
    charged = charge_body()
    charge_create(idempotency_key="k-admin", **charged)
    refund_create(idempotency_key="k-refund", **refund_body(charged["out_trade_no"]))
    charge_close(out_trade_no="P-closed")
    fault_set(mode="decline", count=1, delay_s=0, copies=1)

    listing = admin_browser.get(f"/admin/sandbox/{model}/")
    adding = admin_browser.get(f"/admin/sandbox/{model}/add/")

    assert listing.status_code == 200
    assert adding.status_code == 403
    first = listing.context["cl"].result_list[0]
    detail = admin_browser.get(f"/admin/sandbox/{model}/{first.pk}/change/")
    assert detail.status_code == 200
    assert b'name="_save"' not in detail.content  # a view page, no Save button


# --- The provider's own server (SANDBOX_ONLY: demo/provider_urls.py) ----------------

SHOP_TABLES = [
    "orders/order",
    "orders/product",
    "payments/payment",
    "payments/ledgerentry",
    "idempotency/idempotencykey",
    "auth/user",
    "auth/group",
    "authtoken/tokenproxy",
]


@pytest.fixture
def provider_server(settings):
    settings.ROOT_URLCONF = "demo.provider_urls"


def test_the_providers_admin_lists_only_the_providers_tables(provider_server, admin_browser):
    index = admin_browser.get("/admin/")

    assert index.status_code == 200
    listed = {
        (app["app_label"], model["object_name"].lower())
        for app in index.context["app_list"]
        for model in app["models"]
    }
    assert listed == {("sandbox", model) for model in MODELS}


@pytest.mark.parametrize("table", SHOP_TABLES)
def test_the_providers_admin_has_no_page_for_a_shop_table(provider_server, admin_browser, table):
    assert admin_browser.get(f"/admin/{table}/").status_code == 404
    assert admin_browser.get(f"/admin/{table}/add/").status_code == 404


@pytest.mark.parametrize("model", MODELS)
def test_the_providers_admin_shows_each_of_its_tables(provider_server, admin_browser, model):
    assert admin_browser.get(f"/admin/sandbox/{model}/").status_code == 200
