"""The pages in a real browser: headless Debian Chromium driven by Playwright.

Against pytest-django's live server, with the sandbox provider on it. Every step
leaves a screenshot under test-artifacts/storefront/ (gitignored). Skipped only
where /usr/bin/chromium is absent; CI installs it (.ci/run).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orders.models import Order
from orders.services import shipment_create
from tests.assertions import assert_paid_once, assert_refunded_once
from tests.factories import DEFAULT_PASSWORD, UserFactory

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless=new",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "storefront"
# Generous for a loaded 2-core machine; each wait ends as soon as its condition holds.
WAIT_MS = 30_000
ASYNC_UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture(scope="module")
def allow_orm_beside_playwright() -> Iterator[None]:
    # Playwright's sync API keeps an asyncio loop in this thread for as long as the
    # browser is open, and Django's ORM refuses to run where a loop exists. This test
    # thread is synchronous all the same (the browser is another process), so the
    # database setup, the assertions and the teardown may use the ORM. Module-scoped,
    # like the browser, and restored after it closes.
    previous = os.environ.get(ASYNC_UNSAFE)
    os.environ[ASYNC_UNSAFE] = "true"
    yield
    if previous is None:
        os.environ.pop(ASYNC_UNSAFE, None)
    else:
        os.environ[ASYNC_UNSAFE] = previous


@pytest.fixture(scope="module")
def browser(allow_orm_beside_playwright: None) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def refused_by_policy(message: Any) -> bool:
    # Chromium reports every Content-Security-Policy refusal on the console, as an error.
    return message.type == "error" and "Content Security Policy" in message.text


@pytest.fixture
def page(browser: Any, sandbox: str, demo_mode: None) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1024, "height": 900})
    context.set_default_timeout(WAIT_MS)
    tab = context.new_page()
    # Every test's pages, checked as they run: nothing the policy refuses (edge/csp.py),
    # no script that throws.
    refused: list[str] = []
    tab.on("console", lambda m: refused.append(m.text) if refused_by_policy(m) else None)
    tab.on("pageerror", lambda error: refused.append(f"uncaught: {error}"))
    try:
        yield tab
    finally:
        context.close()
    assert refused == []


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def log_in(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(DEFAULT_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/")


def place_order(page: Any, product: Any) -> Order:
    page.get_by_label(f"Quantity of {product.name}").fill("1")
    page.get_by_role("button", name="Place order").click()
    page.get_by_text("HTTP 201").wait_for()
    number = page.locator("h1").inner_text().removeprefix("Order ").strip()
    return Order.objects.get(number=number)


def wait_paid(page: Any) -> None:
    # Exactly PAID ("UNPAID" contains "PAID"), after the script refreshed the summary.
    page.locator("[data-order-status]", has_text=re.compile(r"^PAID$")).wait_for()
    page.get_by_text("Paid. Nothing more to pay.").wait_for()


def test_log_in_order_and_double_click_pay_charges_once(page, live_server, alice, product, wallet):
    log_in(page, live_server.url, alice.username)
    shot(page, "01-catalogue")
    order = place_order(page, product)
    shot(page, "02-order")

    page.get_by_role("button", name=re.compile(r"^Pay ")).dblclick()

    wait_paid(page)
    answers = page.locator("#answers > li")
    # Both clicks were sent, and both end with the same 200: one fresh, one replayed.
    page.get_by_text("Idempotent-Replayed: true").first.wait_for()
    shot(page, "03-double-click-paid")
    text = answers.all_inner_texts()
    assert any(entry.startswith("Click 1") for entry in text)
    assert any(entry.startswith("Click 2") for entry in text)
    assert_paid_once(order, alice, wallet)
    # Then the page that paid (/checkout/'s) offers the refund, without a reload
    assert page.url.endswith("/checkout/")
    page.get_by_role("button", name="Refund").click()
    page.locator("[data-order-status]", has_text=re.compile(r"^REFUNDED$")).wait_for()
    shot(page, "04-refunded")
    assert_refunded_once(order, alice, wallet, refunded=order.amount)


def test_a_provider_timeout_shows_unknown_then_paid_with_the_same_key(
    page, live_server, alice, product, wallet, fault, settings
):
    settings.PROVIDER_TIMEOUT_S = 1.0
    fault("timeout_after_commit", delay_s=2.0)
    log_in(page, live_server.url, alice.username)
    order = place_order(page, product)

    page.get_by_role("button", name=re.compile(r"^Pay ")).click()

    page.get_by_text("HTTP 503 payment-outcome-unknown").wait_for()
    page.get_by_text("Retrying with the same key in").wait_for()
    shot(page, "04-unknown-retrying")
    wait_paid(page)
    page.locator("#answers").get_by_text("Click 1 (retry 1, same key)").wait_for()
    shot(page, "05-resolved-paid")
    assert_paid_once(order, alice, wallet)


def test_the_books_show_a_clean_audit_and_refresh_live(page, live_server, alice, order, pay):
    assert pay().status_code == 200
    shipment_create(order_id=order.pk)
    log_in(page, live_server.url, alice.username)

    page.goto(f"{live_server.url}/books/")

    page.get_by_text("Clean:").wait_for()
    page.get_by_text(re.compile(r"^Live: updated")).wait_for()  # the polling script ran
    assert page.locator(".card.disagrees").count() == 0
    shot(page, "06-books-clean")
    page.goto(f"{live_server.url}/how-it-works/")
    page.locator("svg.fsm").wait_for()
    shot(page, "07-how-it-works")
    page.goto(f"{live_server.url}/chaos/")
    shot(page, "08-chaos-panel")


def test_the_pages_work_from_the_keyboard(page, live_server, alice, product):
    log_in(page, live_server.url, alice.username)

    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.get_by_label(f"Quantity of {product.name}").focus()
    page.keyboard.press("Control+A")  # replace the 0 the field starts with
    page.keyboard.type("1")
    page.keyboard.press("Enter")  # submits the checkout form

    page.get_by_text("HTTP 201").wait_for()
    page.get_by_role("button", name=re.compile(r"^Pay ")).focus()
    page.keyboard.press("Enter")
    wait_paid(page)
    shot(page, "09-keyboard-paid")
    # Readable on a phone: nothing wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shot(page, "10-phone-order")


def goto(page: Any, url: str) -> None:
    """Open a page and insist it answered 200 (nothing of the first hour may be a 500)."""
    response = page.goto(url)
    assert response is not None
    assert response.status == 200, (url, response.status)


def test_the_first_hour_of_a_new_user(
    page, live_server, alice, product, wallet, fault, settings, background_work
):
    staff = UserFactory.create(username="staff", is_staff=True, is_superuser=True)
    base = live_server.url
    # Log in and buy; double-click Pay: both clicks are sent, one charge, and each
    # answer says in which order it came back.
    log_in(page, base, alice.username)
    first = place_order(page, product)
    page.get_by_role("button", name=re.compile(r"^Pay ")).dblclick()
    wait_paid(page)
    page.get_by_text("(answered 2nd)").wait_for()
    shot(page, "11-first-hour-double-click")
    assert_paid_once(first, alice, wallet)

    # A slow provider: the page says it is waiting, then 503, then the same key settles.
    fault("timeout_after_commit", delay_s=settings.PROVIDER_TIMEOUT_S + 1.5)
    goto(page, f"{base}/")
    slow = place_order(page, product)
    page.get_by_role("button", name=re.compile(r"^Pay ")).click()
    page.get_by_text(
        f"waiting for the provider (up to {settings.PROVIDER_TIMEOUT_S:.0f} s"
    ).wait_for()
    shot(page, "12-first-hour-waiting")
    page.get_by_text("HTTP 503 payment-outcome-unknown").wait_for()
    wait_paid(page)

    # A reload keeps every answer, badged for what it was, and the timeline has them.
    goto(page, f"{base}/orders/{slow.number}/")
    answers = page.locator("#answers > li").all_inner_texts()
    assert any("503 payment-outcome-unknown" in a and "not stored" in a for a in answers)
    assert any(a.startswith("Click 1 (retry 1, same key)") for a in answers)
    assert page.locator("#timeline", has_text="answered 503 payment-outcome-unknown").count()
    shot(page, "13-first-hour-reloaded")

    # The books (money as money), how it works (where it lives), the story.
    goto(page, f"{base}/books/")
    page.get_by_text(re.compile(r"^Live: updated")).wait_for()
    assert "CNY" in page.locator("#books-tables").inner_text()
    goto(page, f"{base}/how-it-works/")
    page.get_by_role("heading", name="Where it lives").wait_for()
    goto(page, f"{base}/")
    page.get_by_role("button", name="Run the story").click()
    page.locator("#settled-by").wait_for(timeout=WAIT_MS * 3)
    assert "One order, one debit, one shipment." in page.content()
    shot(page, "14-first-hour-story")

    # The admin, as staff: money rows are shown, never added, changed or deleted.
    page.context.clear_cookies()
    page.goto(f"{base}/login/")
    page.get_by_label("Username").fill(staff.username)
    page.get_by_label("Password").fill(DEFAULT_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("link", name="Admin").click()
    page.get_by_role("heading", name="Site administration").wait_for()
    goto(page, f"{base}/admin/payments/payment/")
    assert page.get_by_text("Read-only here").count() == 1
    assert page.locator("a.addlink", has_text="Add payment").count() == 0
    goto(page, f"{base}/admin/orders/order/{first.pk}/change/")
    assert page.locator("a.deletelink").count() == 0
    # Django's inline script builds the link and hides it when no line may be added.
    assert page.locator(".add-row a:visible").count() == 0
    shot(page, "15-first-hour-admin-order")


def test_the_admin_the_api_docs_and_the_problem_pages_run_under_the_policy(page, live_server):
    staff = UserFactory.create(username="csp-staff", is_staff=True, is_superuser=True)
    base = live_server.url
    log_in(page, base, staff.username)

    for path in ("/admin/", "/admin/orders/order/", "/admin/orders/product/add/", "/problems/"):
        goto(page, f"{base}{path}")
    goto(page, f"{base}/api/docs/")
    page.locator(".swagger-ui .info").wait_for()  # Swagger UI's scripts ran
    page.get_by_text("/api/v1/orders/", exact=True).first.wait_for()
    shot(page, "20-api-docs-under-csp")
