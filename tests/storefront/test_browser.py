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
from tests.assertions import assert_paid_once
from tests.factories import DEFAULT_PASSWORD

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
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "storefront"
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


@pytest.fixture
def page(browser: Any, sandbox: str, demo_mode: None) -> Any:
    context = browser.new_context(viewport={"width": 1024, "height": 900})
    context.set_default_timeout(WAIT_MS)
    tab = context.new_page()
    try:
        yield tab
    finally:
        context.close()


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
    page.get_by_text("Click 1 (retry 1, same key)").wait_for()
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
