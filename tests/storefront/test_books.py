"""The books page: the four tables and the wallets side by side, the audit, what waits."""

import pytest
from django.test import Client

from orders.services import shipment_create
from payments.models import Payment
from storefront.books import books_snapshot
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_the_books_are_refused_to_visitors_and_outside_demo_mode_to_customers(settings, web):
    settings.DEMO_MODE = False

    assert Client().get("/books/").status_code == 403
    assert web.get("/books/").status_code == 403
    assert web.get("/books/live/").status_code == 403
    settings.DEMO_MODE = True
    assert web.get("/books/").status_code == 200


def test_staff_see_the_books_without_demo_mode(settings, web_for):
    settings.DEMO_MODE = False

    assert web_for(UserFactory.create(is_staff=True)).get("/books/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_after_a_payment_the_tables_and_wallets_agree_and_the_audit_is_clean(
    demo_mode, sandbox, web, order, pay
):
    assert pay().status_code == 200
    shipment_create(order_id=order.pk)  # what the worker does on commit

    response = web.get("/books/")

    books = response.context["books"]
    page = response.content.decode()
    assert books.orders["PAID"] == 1
    assert books.ledger_entries == 1
    assert books.shipments == 1
    assert books.ledger_agrees
    assert books.inventory_agrees
    assert books.wallets_agree
    assert [(w.payer, w.charged_total) for w in books.wallets] == [
        (order.user.username, order.amount)
    ]
    assert books.audit is not None
    assert books.audit.ok, books.audit.findings
    assert "Clean:" in page
    assert "Nothing: no payment is unknown or pending" in page


@pytest.mark.django_db(transaction=True)
def test_after_a_partial_and_a_full_refund_the_books_still_agree(
    demo_mode, sandbox, web, order, pay, refund
):
    assert pay().status_code == 200
    shipment_create(order_id=order.pk)
    assert refund(body={"amount": 1000}).status_code == 200
    assert refund().status_code == 200

    books = web.get("/books/").context["books"]

    assert (books.orders["PAID"], books.orders["REFUNDED"]) == (0, 1)
    assert (books.ledger_entries, books.ledger_amount) == (1, order.amount)  # the capture
    assert books.ledger_agrees
    assert books.wallets_agree
    assert [(w.payer, w.shop_paid_total, w.charged_total) for w in books.wallets] == [
        (order.user.username, 0, 0)
    ]
    assert books.audit.ok, books.audit.findings


@pytest.mark.django_db(transaction=True)
def test_the_live_endpoint_renders_the_same_sections(demo_mode, sandbox, web, order, pay):
    pay()

    data = web.get("/books/live/").json()

    assert set(data["fragments"]) == {
        "books-verdict",
        "books-tables",
        "books-waiting",
        "books-statements",
    }
    assert 'data-books="orders-paid">1<' in data["fragments"]["books-tables"]
    assert "verdict" in data["fragments"]["books-verdict"]


@pytest.mark.django_db(transaction=True)
def test_an_unknown_payment_is_listed_as_waiting_for_reconciliation(
    demo_mode, sandbox, web, order, pay, fault
):
    fault("error_before_commit")
    assert pay().status_code == 503

    response = web.get("/books/")

    payment = Payment.objects.get()
    assert payment.status == "UNKNOWN"
    assert f"<code>{payment.out_trade_no}</code>" in response.content.decode()
    assert response.context["books"].waiting_count == 2  # the payment and its request


def test_an_unreachable_provider_is_said_in_words(demo_mode, web, order):
    Payment.objects.create(
        order=order, out_trade_no="P-down", amount=order.amount, currency="CNY", payer="nobody"
    )

    books = books_snapshot(with_audit=False)

    assert books.wallets[0].error.startswith("provider: ")
    assert not books.wallets_agree
    assert "provider: ConnectionError" in web.get("/books/").content.decode()
