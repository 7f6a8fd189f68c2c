"""The demo shop in two languages: the browser's by default, a remembered switcher.

Every page a staff user can reach in demo mode is rendered with
``Accept-Language: zh-CN`` and must hold no English sentence, and with ``en``
no Chinese (tests/i18n_text.py says what counts as what a reader sees). Every
string the templates and the storefront's code mark for translation must be
translated in the Chinese catalogue.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import translation

from config.i18n import LOCALE_DIR, parse
from demo.shop.templatetags.storefront import money
from tests.conftest import client_for, new_key

# demo_shop: seeded, staff, one order (the link crawler's own set-up, used by name).
from tests.demo.shop.test_links import crawl, demo_shop  # noqa: F401
from tests.factories import UserFactory
from tests.i18n_text import chinese_texts, english_phrases, marked_strings, visible_text

pytestmark = pytest.mark.django_db

CATALOGUE = LOCALE_DIR / "zh_Hans" / "LC_MESSAGES" / "django.po"
CHINESE = "zh-CN,zh;q=0.9,en;q=0.5"
# Pages of the shop and its problem pages; the admin and Swagger UI are Django's and
# drf-spectacular's (the admin translates itself), static files are not pages.
NOT_OURS = ("/admin/", "/api/", "/static/", "/i18n/")


def test_every_marked_string_is_translated_in_the_chinese_catalogue():
    translated = {entry.key for entry in parse(CATALOGUE) if entry.translated}

    missing = {key: where for key, where in marked_strings().items() if key not in translated}

    assert not missing, (
        "not in locale/zh_Hans/LC_MESSAGES/django.po (run makemessages, translate, "
        f"python -m config.i18n): {missing}"
    )


def test_the_string_finder_finds_what_the_templates_and_code_mark():
    found = marked_strings()

    assert "Place order" in found  # {% translate %}
    assert "Pay %(amount)s" in found  # {% blocktranslate with %}
    assert "%(counter)s problem found.\0%(counter)s problems found." in found  # plural
    assert "Choose at least one item: a quantity above 0." in found  # gettext() in Python
    assert "Checkout form expired" in found  # gettext_noop(), shown translated


def _staff() -> Any:
    return UserFactory._meta.model.objects.get(username="staff")


def _pages(user: Any, language: str) -> dict[str, str]:
    client = Client(headers={"accept-language": language})
    client.force_login(user)
    pages = {}
    for path, status in crawl(client).items():
        if status == 200 and not path.startswith(NOT_OURS):
            response = client.get(path, follow=True)
            if "text/html" in response.get("Content-Type", ""):
                pages[path] = response.content.decode()
    return pages


@pytest.mark.usefixtures("demo_shop")
def test_every_page_in_chinese_has_no_english_sentence():
    pages = _pages(_staff(), CHINESE)

    assert {"/", "/orders/", "/books/", "/how-it-works/", "/chaos/", "/problems/"} <= set(pages)
    for path, html in pages.items():
        language, texts = visible_text(html)
        assert language == "zh-hans", path
        assert not english_phrases(texts), (path, english_phrases(texts))


@pytest.mark.usefixtures("demo_shop")
def test_every_page_in_english_has_no_chinese():
    pages = _pages(_staff(), "en-US,en;q=0.9")

    assert "/chaos/" in pages
    for path, html in pages.items():
        language, texts = visible_text(html)
        assert language == "en", path
        assert not chinese_texts(texts), (path, chinese_texts(texts))


@pytest.mark.usefixtures("demo_shop")
def test_every_shop_page_carries_the_language_switcher():
    pages = _pages(_staff(), CHINESE)

    shop_pages = {path: html for path, html in pages.items() if not path.startswith("/problems/")}
    assert shop_pages
    for path, html in shop_pages.items():
        assert 'action="/i18n/setlang/"' in html, path
        assert 'lang="en">English</button>' in html, path


def test_the_browsers_language_is_the_default_and_the_switcher_is_remembered(user):
    browser = Client(headers={"accept-language": CHINESE})
    browser.force_login(user)
    assert '<html lang="zh-hans">' in browser.get("/").content.decode()

    switched = browser.post("/i18n/setlang/", {"language": "en", "next": "/orders/"})

    assert switched.status_code == 302
    assert switched["Location"] == "/orders/"
    cookie = switched.cookies[settings.LANGUAGE_COOKIE_NAME]
    assert cookie.value == "en"
    assert int(cookie["max-age"]) == settings.LANGUAGE_COOKIE_AGE  # outlives the session
    # The browser still asks for Chinese; the remembered choice wins.
    assert '<html lang="en">' in browser.get("/orders/").content.decode()
    browser.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    assert "我的订单" in browser.get("/orders/").content.decode()


def test_a_checkout_in_chinese_answers_in_chinese(user, product):
    browser = Client(headers={"accept-language": CHINESE})
    browser.force_login(user)
    token = str(browser.get("/").context["form"]["checkout_token"].value())

    placed = browser.post("/checkout/", {"checkout_token": token, f"qty-{product.sku}": "1"})
    again = browser.post("/checkout/", {"checkout_token": token, f"qty-{product.sku}": "1"})

    for response in (placed, again):
        _, texts = visible_text(response.content.decode())
        assert not english_phrases(texts), english_phrases(texts)
    assert "动作刚刚执行" in placed.content.decode()  # the fresh answer, explained
    assert "没有再执行一遍" in again.content.decode()  # the replay, explained
    assert "Idempotent-Replayed: true" in again.content.decode()  # the header, as sent


def test_a_form_error_in_chinese_is_said_in_chinese(user, product):
    browser = Client(headers={"accept-language": CHINESE})
    browser.force_login(user)
    token = str(browser.get("/").context["form"]["checkout_token"].value())

    nothing = browser.post("/checkout/", {"checkout_token": token, f"qty-{product.sku}": "0"})

    assert "请至少选一件商品" in nothing.content.decode()


@pytest.mark.parametrize(
    ("language", "amount", "currency", "shown"),
    [
        ("en", 1999, "CNY", "19.99 CNY"),
        ("zh-hans", 1999, "CNY", "¥19.99"),
        ("en", 123456789, "USD", "1234567.89 USD"),
        ("zh-hans", 123456789, "USD", "US$1,234,567.89"),
        ("zh-hans", 1500, "JPY", "JP¥1,500"),
        ("zh-hans", -250, "CNY", "-¥2.50"),
        ("en", 1000, "KWD", "1.000 KWD"),
        ("zh-hans", 7, "XYZ", "0.07 XYZ"),
    ],
)
def test_amounts_are_money_in_both_languages(language, amount, currency, shown):
    with translation.override(language):
        assert money(amount, currency) == shown


def test_the_api_keeps_its_codes_and_details_whatever_the_language(user):
    answer = client_for(user).post(
        "/api/v1/orders/",
        {"lines": [{"sku": "NO-SUCH-SKU", "quantity": 1}]},
        format="json",
        headers={"Idempotency-Key": new_key(), "Accept-Language": CHINESE},
    )

    problem = answer.json()
    assert answer.status_code == 400
    assert problem["code"] == "unknown-sku"  # the contract, never translated
    assert not re.search(r"[\u3400-\u9fff]", problem["detail"])
