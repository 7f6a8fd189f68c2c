"""Every page of the shop, in a real browser, in each language, as a newcomer sees it.

The pages are the ones a staff user reaches by following links from the home page
(the link crawler's set-up, with one order paid and its notification delivered,
so the timeline and the books have something to tell). Each is opened in Chromium
with the reader's language, screenshotted under
test-artifacts/storefront/pages/<language>/, and its visible text checked: no
Markdown left raw (backticks), no HTML entity shown as text (escaped twice), no
stored enum value where its meaning belongs, and no console error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from callbacks.models import ProviderNotification
from edge.problems import problem_types
from orders.models import Order
from tests.conftest import client_for, new_key
from tests.demo.shop.conftest import BackgroundWork
from tests.demo.shop.test_browser import (  # noqa: F401 (fixtures, used by name)
    ARTIFACTS,
    CHROMIUM,
    WAIT_MS,
    allow_orm_beside_playwright,
    browser,
)
from tests.demo.shop.test_links import crawl, demo_shop  # noqa: F401

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
    pytest.mark.django_db(transaction=True),
]

LANGUAGES = {"en-US": "en", "zh-CN": "zh-hans"}
# Django's admin and Swagger UI are not the shop's pages; static files are not pages.
NOT_OURS = ("/admin/", "/api/", "/static/", "/i18n/")
MARKDOWN_CODE = re.compile(r"`[^`\n]+`")
# An HTML entity shown as text (&#x27;, &amp;): something was escaped twice.
ENTITY = re.compile(r"&(?:#x?[0-9a-fA-F]+|[a-zA-Z]+);")
# The notification outcomes as stored: a page shows what they mean instead.
ENUM_VALUES = re.compile(
    r"\b(?:" + "|".join(value for value, _label in ProviderNotification.Outcome.choices) + r")\b"
)


PROSE = """() => {
  const body = document.body.cloneNode(true);
  body.querySelectorAll('[lang="en"], code, script, style').forEach((e) => e.remove());
  return body.textContent;
}"""


@pytest.fixture
def shop_with_a_paid_order(demo_shop: Any, sandbox: str) -> Any:  # noqa: F811
    """The crawler's shop, its staff user's order paid and the notification delivered."""
    order = Order.objects.get(user=demo_shop)
    paid = client_for(demo_shop).post(
        f"/api/v1/orders/{order.number}/pay/", headers={"Idempotency-Key": new_key()}
    )
    assert paid.status_code == 200, paid.content
    BackgroundWork().once()
    assert ProviderNotification.objects.filter(out_trade_no__startswith="P").exists()
    return demo_shop


def _shop_pages(user: Any) -> list[str]:
    client = Client()
    client.force_login(user)
    pages = [
        path
        for path, status in crawl(client).items()
        if status == 200 and not path.startswith(NOT_OURS)
    ]
    pages += [f"/problems/{code}" for code in problem_types()]  # the index's leaves
    return sorted({path for path in pages if "text/html" in client.get(path)["Content-Type"]})


@pytest.fixture(params=sorted(LANGUAGES))
def reader(
    request: pytest.FixtureRequest,
    browser: Any,  # noqa: F811 (the fixture of that name, imported above)
    live_server: Any,
    shop_with_a_paid_order: Any,
) -> Iterator[tuple[str, Any]]:
    language = str(request.param)
    context = browser.new_context(viewport={"width": 1024, "height": 900}, locale=language)
    context.set_default_timeout(WAIT_MS)
    # Logged in as the staff user: the session of a Django test client, as a cookie.
    session = Client()
    session.force_login(shop_with_a_paid_order)
    cookie = session.cookies[settings.SESSION_COOKIE_NAME].value
    context.add_cookies(
        [{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}]
    )
    try:
        yield language, context
    finally:
        context.close()


def test_every_page_in_each_language_shows_no_markdown_no_enum_and_no_console_error(
    reader: tuple[str, Any], live_server: Any, shop_with_a_paid_order: Any
) -> None:
    language, context = reader
    paths = _shop_pages(shop_with_a_paid_order)
    assert {"/", "/orders/", "/books/", "/how-it-works/", "/chaos/", "/problems/"} <= set(paths)
    assert any(path.startswith("/orders/2") for path in paths)  # the paid order's page
    assert "/problems/bad-request" in paths
    folder = ARTIFACTS / "pages" / language
    folder.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    tab = context.new_page()
    errors: list[str] = []
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda error: errors.append(f"uncaught: {error}"))

    for path in paths:
        errors.clear()
        tab.goto(live_server.url + path, wait_until="load")
        name = path.strip("/").replace("/", "_") or "home"
        tab.screenshot(path=str(folder / f"{name}.png"), full_page=True)
        assert tab.locator("html").get_attribute("lang") == LANGUAGES[language], path
        text = tab.locator("body").inner_text()
        if raw := MARKDOWN_CODE.findall(text):
            problems.append(f"{path}: raw Markdown {raw[:3]}")
        if entities := ENTITY.findall(text):
            problems.append(f"{path}: escaped twice {entities[:3]}")
        # English on a Chinese page on purpose (marked lang="en": the detail a client
        # receives) and code are not prose to translate.
        prose = tab.evaluate(PROSE)
        if language == "zh-CN" and (enums := ENUM_VALUES.findall(prose)):
            problems.append(f"{path}: untranslated enum {sorted(set(enums))}")
        if "received: duplicate" in text:
            problems.append(f"{path}: the enum 'duplicate' as a label")
        problems += [f"{path}: console: {error}" for error in errors]

    assert problems == []
