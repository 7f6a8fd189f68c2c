"""Every link works: a crawler over the demo's pages, and the README's local links.

As staff in demo mode (who sees every page and link) and as a visitor: every
page of the shop is fetched, every link and asset on it followed; pages of the
shop are crawled further, the admin, API docs and problem pages are fetched
once (tests/test_admin.py walks the admin). Nothing may answer other than 200
(after redirects). The README's links to files must name files that exist, and
its links into the shop must answer 200.
"""

from __future__ import annotations

import re
from collections import deque
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit

import pytest
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client

from tests.conftest import client_for, new_key
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
# Fetched, never crawled: big generated areas with their own tests.
LEAVES = ("/admin/", "/api/", "/problems/")
DEMO_URL = re.compile(r"http://(?:127\.0\.0\.1|localhost):8000(/[^\s)`'\"<>]*)?")
PROVIDER_URL = re.compile(r"http://(?:127\.0\.0\.1|localhost):8001(/[^\s)`'\"<>]*)?")
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"a": "href", "link": "href", "script": "src", "img": "src", "form": None}
        name = wanted.get(tag)
        for key, value in attrs:
            if key == name and value:
                self.found.append(value)


def _links(page: str, base: str) -> list[str]:
    parser = _Links()
    parser.feed(page)
    links = []
    for raw in parser.found:
        url, _ = urldefrag(urljoin(base, raw))
        parts = urlsplit(url)
        if parts.scheme in ("", "http", "https") and parts.netloc in ("", "testserver"):
            links.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    return [link for link in links if link]


def crawl(client: Client) -> dict[str, int]:
    """Every page reachable from / (and what each link answered)."""
    seen: dict[str, int] = {}
    queue = deque(["/"])
    while queue:
        path = queue.popleft()
        if path in seen:
            continue
        if path.startswith("/static/"):
            seen[path] = 200 if finders.find(path.removeprefix("/static/").split("?")[0]) else 404
            continue
        response = client.get(path, follow=True)
        seen[path] = response.status_code
        if response.status_code != 200 or path.startswith(LEAVES):
            continue
        if "text/html" in response.get("Content-Type", ""):
            queue.extend(_links(response.content.decode(), path))
    return seen


@pytest.fixture
def demo_shop(demo_mode):
    call_command("seed_demo", stdout=None)
    staff = UserFactory._meta.model.objects.get(username="staff")
    answer = client_for(staff).post(
        "/api/v1/orders/",
        {"lines": [{"sku": "PEN-BRUSH", "quantity": 1}]},
        format="json",
        headers={"Idempotency-Key": new_key()},
    )
    assert answer.status_code == 201
    return staff


def test_every_link_on_every_page_answers_200_as_staff(demo_shop):
    staff = Client()
    staff.force_login(demo_shop)

    answered = crawl(staff)

    broken = {path: status for path, status in answered.items() if status != 200}
    assert not broken
    # The crawl reached the pages the first hour uses.
    for page in ("/orders/", "/books/", "/how-it-works/", "/chaos/", "/admin/", "/api/docs/"):
        assert page in answered, page
    assert any(path.startswith("/orders/2") for path in answered)  # an order page


def test_every_link_a_visitor_sees_answers_200(demo_shop):
    answered = crawl(Client())

    assert {path: status for path, status in answered.items() if status != 200} == {}
    assert "/login/" in answered


def test_the_readmes_local_links_lead_somewhere(demo_shop):
    readme = (ROOT / "README.md").read_text()
    staff = Client()
    staff.force_login(demo_shop)

    files = [
        target
        for target in MARKDOWN_LINK.findall(readme)
        if not urlsplit(target).scheme and not target.startswith("#")
    ]
    # A URL at the end of a sentence keeps its full stop out of the path.
    shop_paths = {(match.group(1) or "/").rstrip(".,;:") for match in DEMO_URL.finditer(readme)}

    assert files
    assert shop_paths
    for target in files:
        assert (ROOT / target.split("#")[0]).exists(), target
    for path in shop_paths:
        assert staff.get(path, follow=True).status_code == 200, path


def test_the_readmes_provider_links_lead_to_the_provider_and_not_a_second_shop(demo_shop, settings):
    # The demo's provider server runs with SANDBOX_ONLY (demo/runner.py).
    settings.ROOT_URLCONF = "demo.provider_urls"
    readme = (ROOT / "README.md").read_text()
    staff = Client()
    staff.force_login(demo_shop)
    provider_paths = {
        (match.group(1) or "/").rstrip(".,;:") for match in PROVIDER_URL.finditer(readme)
    }

    assert {"/sandbox/", "/admin/"} <= provider_paths
    for path in provider_paths:
        assert staff.get(path, follow=True).status_code == 200, path
    index = staff.get("/sandbox/").json()
    assert "GET /sandbox/v1/wallets/{payer}" in index["endpoints"]
    # Its root leads to the provider's index; the shop is not served there.
    assert staff.get("/")["Location"] == "/sandbox/"
    for shop_page in ("/orders/", "/books/", "/api/v1/products/"):
        assert staff.get(shop_page).status_code == 404, shop_page
