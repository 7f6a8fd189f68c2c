"""The books page: the four tables and the wallets side by side, the audit, what waits."""

import pytest
from django.test import Client

from callbacks.models import ProviderNotification
from demo.shop.books import books_snapshot
from demo.shop.templatetags.storefront import money
from orders.services import shipment_create
from payments.models import Payment
from reconcile.desk.models import Case, CaseState
from reconcile.desk.services import notification_case_open
from tests.factories import DEFAULT_PASSWORD, UserFactory, desk_operator

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
    # Money as the shop shows it (39.98 CNY), never as bare minor units.
    shown = money(order.amount, order.currency)
    assert f"<dt>Paid total</dt><dd>{shown}</dd>" in page
    assert f"<dt>Captured total</dt><dd>{shown}</dd>" in page
    assert "minor units" not in page


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
        "books-cases",
        "books-statements",
        "books-gauges",
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


@pytest.mark.django_db(transaction=True)
def test_the_books_show_the_gauges_the_alerts_watch(
    demo_mode, sandbox, web, order, pay, fault, settings
):
    # Given a pay whose outcome is unknown (the provider answers after our timeout)
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", delay_s=1)
    assert pay().status_code == 503

    response = web.get("/books/")

    gauges = {row.name + row.labels: row.shown for row in response.context["books"].gauges}
    page = response.content.decode()
    assert gauges["onceshop_payments_unresolved"] == "1"
    # the gauge is the page's own audit run (the same number, not a second audit)
    assert gauges["onceshop_audit_findings"] == str(len(response.context["books"].audit.findings))
    assert gauges["onceshop_audit_last_run_timestamp_seconds"].endswith(" s ago")
    assert 'data-gauge="onceshop_payments_unresolved">1<' in page
    # And in Chinese, the ages and durations too
    chinese = web.get("/books/", headers={"accept-language": "zh-hans"}).context["books"]
    shown = {row.name + row.labels: row.shown for row in chinese.gauges}
    assert shown["onceshop_audit_last_run_timestamp_seconds"].endswith(" 秒前")
    assert not any(value.endswith((" s", " s ago")) for value in shown.values())


@pytest.mark.parametrize(
    ("language", "label"),
    [
        ("en", "the payment was already settled the same way"),
        ("zh-hans", "支付早已按同样的结果结清"),
    ],
)
def test_the_books_count_notifications_by_what_their_outcome_means(demo_mode, web, language, label):
    ProviderNotification.objects.create(
        notify_id="N-settled-1",
        out_trade_no="P-SETTLED-1",
        trade_status="SUCCESS",
        amount=500,
        currency="CNY",
        outcome=ProviderNotification.Outcome.DUPLICATE,
        response_status=200,
        response_body={},
    )

    page = web.get("/books/", headers={"accept-language": language}).content.decode()

    assert f"<dt>{label}</dt><dd>1</dd>" in page
    assert "duplicate" not in page


def _unknown_notification_case() -> Case:
    notification = ProviderNotification.objects.create(
        notify_id="N-foreign-1",
        trade_no="T-foreign-1",
        out_trade_no="P-FOREIGN-1",
        trade_status="CLOSED",
        amount=500,
        currency="CNY",
        outcome=ProviderNotification.Outcome.UNMATCHED,
        reason="no such out_trade_no",
        response_status=422,
        response_body={},
    )
    notification_case_open(notification=notification)
    return Case.objects.get()


def test_the_books_list_open_cases_and_staff_dismiss_one_with_a_reason(demo_mode, web, web_for):
    case = _unknown_notification_case()
    staff = web_for(desk_operator("dismiss"))  # staff holding the desk's dismiss permission

    # A customer (demo mode) sees the case, without the actions
    seen = web.get("/books/").content.decode()
    assert "open cases (1)" in seen
    assert "P-FOREIGN-1" in seen
    assert 'name="note"' not in seen
    assert (
        web.post(f"/books/cases/{case.pk}/", {"action": "dismiss", "note": "x"}).status_code == 403
    )
    assert Case.objects.get().state == CaseState.OPEN
    # Staff see the actions that fit, and one click with a reason dismisses it
    page = staff.get("/books/").content.decode()
    assert '<option value="dismiss">dismiss</option>' in page
    answer = staff.post(f"/books/cases/{case.pk}/", {"action": "dismiss", "note": "another shop's"})
    assert answer.status_code == 302
    assert Case.objects.get().state == CaseState.RESOLVED
    assert ProviderNotification.objects.get().resolved_at is not None
    assert "Nothing waits for a person." in staff.get("/books/").content.decode()


def test_a_visitor_is_told_why_and_led_to_the_login_and_back(demo_mode, user):
    page = Client().get("/books/")

    assert page.status_code == 403
    text = page.content.decode()
    assert "The books are for staff, or for anyone logged in while the demo runs." in text
    assert '<p id="refused-login"><a href="/login/?next=/books/">Log in</a>' in text
    # Following the link: the login brings them back to the books.
    visitor = Client()
    logged_in = visitor.post(
        "/login/?next=/books/",
        {"username": user.username, "password": DEFAULT_PASSWORD, "next": "/books/"},
    )
    assert logged_in["Location"] == "/books/"
    assert visitor.get("/books/").status_code == 200


def test_a_logged_in_customer_outside_demo_mode_gets_no_login_link(settings, web):
    settings.DEMO_MODE = False

    text = web.get("/books/").content.decode()

    assert 'id="refused-login"' not in text
