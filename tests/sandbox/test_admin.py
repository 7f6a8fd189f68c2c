"""The provider's tables in the Django admin: visible to superusers, never editable."""

import pytest
from django.test import Client

from sandbox.services import charge_close, charge_create, fault_set, refund_create
from tests.factories import UserFactory
from tests.sandbox.conftest import charge_body, refund_body

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
