"""The first journey in a real browser, once in each language.

Chromium is started with the language a reader's browser would send
(``Accept-Language``); the shop answers in it without being asked, the pay
button's script speaks it too, and the switcher changes it for good. Each step
leaves a screenshot under test-artifacts/storefront/<language>/.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from orders.models import Order
from tests.assertions import assert_paid_once
from tests.demo.shop.test_browser import (  # noqa: F401 (fixtures, used by name)
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    WAIT_MS,
    allow_orm_beside_playwright,
    browser,
)
from tests.factories import DEFAULT_PASSWORD

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
    pytest.mark.django_db(transaction=True),
]

# What a reader of each language clicks and reads. The product name stays as the
# catalogue spells it; everything around it is the page's language.
WORDS: dict[str, dict[str, Any]] = {
    "en-US": {
        "html": "en",
        "username": "Username",
        "password": "Password",
        "log_in": "Log in",
        "quantity": "Quantity of {product}",
        "place_order": "Place order",
        "pay": re.compile(r"^Pay "),
        "paid": "Paid. Nothing more to pay.",
        "click_2": "Click 2",
        "other": "简体中文",
        "other_html": "zh-hans",
        "other_nav": "我的订单",
    },
    "zh-CN": {
        "html": "zh-hans",
        "username": "用户名",
        "password": "密码",
        "log_in": "登录",
        "quantity": "{product} 的数量",
        "place_order": "下单",
        "pay": re.compile(r"^支付 "),
        "paid": "已支付",
        "click_2": "第 2 次点击",
        "other": "English",
        "other_html": "en",
        "other_nav": "My orders",
    },
}


@pytest.fixture(params=sorted(WORDS))
def language(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def localized_page(
    browser: Any,  # noqa: F811 (the fixture of that name, imported above)
    sandbox: str,
    demo_mode: None,
    language: str,
) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1024, "height": 900}, locale=language)
    context.set_default_timeout(WAIT_MS)
    tab = context.new_page()
    try:
        yield tab
    finally:
        context.close()


def shot(page: Any, language: str, name: str) -> None:
    folder = ARTIFACTS / language
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def test_the_first_journey_in_each_language(
    localized_page, live_server, alice, product, wallet, language
):
    page, words = localized_page, WORDS[language]

    page.goto(f"{live_server.url}/login/")
    assert page.locator("html").get_attribute("lang") == words["html"]  # the browser's choice
    page.get_by_label(words["username"]).fill(alice.username)
    page.get_by_label(words["password"]).fill(DEFAULT_PASSWORD)
    page.get_by_role("button", name=words["log_in"], exact=True).click()
    page.wait_for_url(f"{live_server.url}/")
    shot(page, language, "01-catalogue")

    page.get_by_label(words["quantity"].format(product=product.name)).fill("1")
    page.get_by_role("button", name=words["place_order"]).click()
    page.get_by_text("HTTP 201").wait_for()
    order = Order.objects.get(user=alice)
    shot(page, language, "02-order")

    page.get_by_role("button", name=words["pay"]).dblclick()
    page.locator("[data-order-status]", has_text=re.compile(r"^PAID$")).wait_for()
    page.get_by_text(words["paid"]).wait_for()
    page.get_by_text("Idempotent-Replayed: true").first.wait_for()
    shot(page, language, "03-double-click-paid")
    answers = page.locator("#answers > li").all_inner_texts()
    assert any(entry.startswith(words["click_2"]) for entry in answers)  # the script's words
    assert_paid_once(order, alice, wallet)

    # The switcher: the other language, on this page and every page after it.
    page.get_by_role("button", name=words["other"]).click()
    page.wait_for_load_state()
    assert page.locator("html").get_attribute("lang") == words["other_html"]
    page.goto(f"{live_server.url}/")
    assert page.locator("html").get_attribute("lang") == words["other_html"]
    page.get_by_role("link", name=words["other_nav"]).wait_for()
    shot(page, language, "04-switched")
