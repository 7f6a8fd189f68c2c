"""Every page is served with a strict Content-Security-Policy (edge/csp.py), and no
page needs more: no inline script, style or event handler runs without the
response's nonce. The browser's side of it is tests/demo/shop/test_browser.py."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern

from demo.shop import urls as page_urls
from edge.csp import HEADER
from orders.models import Order
from tests.demo.shop.test_form_nul import route

pytestmark = pytest.mark.django_db

JSON_ISLAND = "application/json"


class InlineCode(HTMLParser):
    """What a page would run or style inline, and under which nonce."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.nonces: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        handlers = [name for name in found if name.startswith("on")]
        if handlers or "style" in found:
            self.found.append(f"<{tag} {' '.join(handlers) or 'style'}>")
        inline_script = tag == "script" and "src" not in found and found.get("type") != JSON_ISLAND
        if inline_script or tag == "style":
            if "nonce" in found:
                self.nonces.add(found["nonce"])
            else:
                self.found.append(f"<{tag}> without a nonce")


def pages(number: str) -> list[str]:
    found = []
    for pattern in page_urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        found.append(route(pattern, number))
    return [*found, "/admin/", "/admin/orders/order/", "/problems/", "/api/docs/"]


def nonce_of(header: str) -> str:
    match = re.search(r"'nonce-([^']+)'", header)
    assert match, header
    return match.group(1)


@pytest.fixture
def staff(user: User) -> Client:
    user.is_staff = user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


def test_every_page_has_a_strict_policy_and_nothing_inline_without_its_nonce(
    staff: Client, order: Order
):
    checked: dict[str, Any] = {}
    for path in pages(order.number):
        for client in (Client(), staff):
            response = client.get(path)
            if response.status_code != 200 or "html" not in response["Content-Type"]:
                continue
            header = response[HEADER]
            assert "'unsafe-inline'" not in header, path
            assert "'unsafe-eval'" not in header, path
            assert "script-src 'self' 'nonce-" in header
            assert "object-src 'none'" in header
            assert "frame-ancestors 'none'" in header
            parser = InlineCode()
            parser.feed(response.content.decode())
            assert parser.found == [], (path, parser.found)
            assert parser.nonces <= {nonce_of(header)}, path
            checked[path] = header

    assert {"/", "/login/", "/admin/", "/problems/", "/api/docs/"} <= set(checked)
    assert f"/orders/{order.number}/" in checked


def test_the_nonce_is_new_for_every_response():
    first, second = Client().get("/problems/"), Client().get("/problems/")

    assert nonce_of(first[HEADER]) != nonce_of(second[HEADER])


def test_swagger_ui_loads_its_start_up_script_from_the_site():
    page = Client().get("/api/docs/")
    script = Client().get("/api/docs/?script=")

    assert b'src="/api/docs/?script="' in page.content
    assert script.status_code == 200
    assert "javascript" in script["Content-Type"]


def test_the_api_answers_in_json_without_a_page_policy(client):
    response = client.get("/api/v1/products/")

    assert response.status_code == 200
    assert HEADER not in response
