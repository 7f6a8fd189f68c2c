"""The admin as staff: every page answers, and money rows are shown, never edited.

Orders, payments, ledger entries, inventory movements, shipments, notifications and
idempotency records (the shop's and the provider's) change only through the
services. The admin must not offer Add, Save or Delete on them, and a form that
is posted anyway is refused with 403, never a 500 from a half-filled row.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib import admin
from django.db.models import Model
from django.test import Client
from django.urls import reverse

from callbacks.models import ProviderNotification
from demo.sandbox.delivery import notification_deliver
from demo.sandbox.models import Charge, Fault, IdempotencyRecord, Notification, Refund, Wallet
from edge.money import money
from idempotency.models import IdempotencyKey
from orders.models import InventoryMovement, Order, Product, Shipment
from orders.services import shipment_create
from payments.models import LedgerEntry, LedgerKind, Payment
from payments.models import Refund as ShopRefund
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

MONEY_MODELS: list[type[Model]] = [
    Order,
    Payment,
    ShopRefund,
    LedgerEntry,
    InventoryMovement,
    Shipment,
    ProviderNotification,
    IdempotencyKey,
    Wallet,
    Charge,
    Refund,
    IdempotencyRecord,
    Notification,
    Fault,
]


@pytest.fixture
def staff_web() -> Client:
    web = Client()
    web.force_login(UserFactory.create(username="boss", is_staff=True, is_superuser=True))
    return web


@pytest.fixture
def every_row(order: Order, pay: Any, refund: Any, fault: Any) -> Order:
    """A paid, partly refunded order and everything it wrote, at the shop and the provider."""
    assert pay().status_code == 200
    assert refund(body={"amount": 1}).status_code == 200
    assert set(LedgerEntry.objects.values_list("kind", flat=True)) == {
        LedgerKind.CAPTURE,
        LedgerKind.REFUND,
    }
    shipment_create(order_id=order.pk)  # what the fulfil task does after the pay
    fault("decline")  # armed for the next charge: a fault row to show
    for notification in Notification.objects.all():
        notification_deliver(notification_id=notification.pk)
    for model in MONEY_MODELS:
        assert model._default_manager.exists(), f"no {model.__name__} row to show"
    return order


def _url(model: type[Model], view: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def test_every_admin_page_answers_without_a_server_error(staff_web, every_row):
    for model in admin.site._registry:
        changelist = staff_web.get(_url(model, "changelist"))
        assert changelist.status_code == 200, model
        row = model._default_manager.first()
        if row is not None:
            assert staff_web.get(_url(model, "change", row.pk)).status_code == 200, model
        assert staff_web.get(_url(model, "add")).status_code in {200, 403}, model


def test_money_rows_offer_no_add_change_or_delete(staff_web, every_row):
    for model in MONEY_MODELS:
        _assert_read_only(staff_web, model)


def _assert_read_only(staff_web: Client, model: type[Model]) -> None:
    row = model._default_manager.first()
    assert row is not None, model

    changelist = staff_web.get(_url(model, "changelist")).content.decode()
    change = staff_web.get(_url(model, "change", row.pk)).content.decode()

    assert f'href="{_url(model, "add")}"' not in changelist  # no Add, here or in the menu
    assert "deletelink" not in change
    assert 'name="_save"' not in change
    # Django's inline script offers "Add another" only while MAX_NUM exceeds TOTAL.
    totals = [int(n) for n in re.findall(r'-TOTAL_FORMS" value="(\d+)"', change)]
    maxima = [int(n) for n in re.findall(r'-MAX_NUM_FORMS" value="(\d*)"', change)]
    assert all(most <= total for most, total in zip(maxima, totals, strict=True))
    assert "Read-only here: the admin never adds, edits or deletes" in changelist
    assert "Read-only here: the admin never adds, edits or deletes" in change
    # The note follows the object tools (HISTORY), which float up beside the title:
    # above them, it would sit under the button.
    assert change.index('class="object-tools"') < change.index("read-only-note")
    # Posting the forms anyway is refused, and nothing is written or removed.
    count = model._default_manager.count()
    assert staff_web.post(_url(model, "add"), {}).status_code == 403
    assert staff_web.post(_url(model, "delete", row.pk), {"post": "yes"}).status_code == 403
    assert staff_web.post(_url(model, "change", row.pk), {}).status_code == 403
    assert model._default_manager.count() == count


def test_a_paid_order_says_how_it_changes(staff_web, every_row):
    every_row.refresh_from_db()
    assert every_row.status == Order.Status.PAID

    page = staff_web.get(_url(Order, "change", every_row.pk)).content.decode()

    assert "a cancel" in page
    assert every_row.lines.get().sku in page  # its lines are shown, read-only


def test_a_product_added_in_the_admin_starts_with_no_stock(staff_web):
    answer = staff_web.post(
        _url(Product, "add"),
        {"sku": "NEW-1", "name": "New", "price": "100", "currency": "CNY"},
    )

    assert answer.status_code == 302
    product = Product.objects.get(sku="NEW-1")
    assert product.stock == 0
    assert not InventoryMovement.objects.filter(product=product).exists()


def test_a_product_with_a_bad_currency_is_a_form_error_not_a_500(staff_web):
    answer = staff_web.post(
        _url(Product, "add"),
        {"sku": "NEW-2", "name": "New", "price": "100", "currency": "cny"},
    )

    assert answer.status_code == 200
    assert not Product.objects.filter(sku="NEW-2").exists()


def test_amounts_read_in_major_units_with_their_currency(staff_web, every_row):
    # Given a paid order, partly refunded: its rows at the shop and the provider
    every_row.refresh_from_db()
    payment = Payment.objects.get(order=every_row)
    refund = ShopRefund.objects.get(order=every_row)
    rows: list[tuple[Any, str]] = [
        (every_row, "amount"),
        (every_row, "refunded_amount"),
        (Product.objects.get(pk=every_row.lines.get().product_id), "price"),
        (payment, "amount"),
        (refund, "amount"),
        (LedgerEntry.objects.get(payment=payment, kind=LedgerKind.CAPTURE), "amount"),
        (ProviderNotification.objects.filter(out_trade_no=payment.out_trade_no)[0], "amount"),
        (Charge.objects.get(out_trade_no=payment.out_trade_no), "amount"),
        (Refund.objects.get(out_refund_no=refund.refund_no), "amount"),
    ]

    for row, field in rows:
        raw = getattr(row, field)
        shown = money(raw, row.currency)
        model = type(row)
        # When staff open the list and the row
        changelist = staff_web.get(_url(model, "changelist")).content.decode()
        change = staff_web.get(_url(model, "change", row.pk)).content.decode()

        # Then the amount reads as money, and nowhere as the bare minor units
        where = f"{model.__name__}.{field}"
        assert f'<td class="field-{field}">{shown}</td>' in changelist, where
        assert f'<td class="field-{field}">{raw}</td>' not in changelist, where
        assert f'<div class="readonly">{shown}</div>' in change or model is Product, where
        assert f'<div class="readonly">{raw}</div>' not in change, where
    # The order's lines, inline on its page: their unit price too.
    line = every_row.lines.get()
    page = staff_web.get(_url(Order, "change", every_row.pk)).content.decode()
    assert money(line.unit_price, every_row.currency) in page
    assert f"<p>{line.unit_price}</p>" not in page
