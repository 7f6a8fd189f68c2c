"""A visitor who is not logged in, in Chromium: every page that needs a login says
why, links to it, and the login brings them back to where they were.

Screenshots under test-artifacts/storefront/logged-out/.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.demo.shop.test_browser import (  # noqa: F401 (fixtures, used by name)
    ARTIFACTS,
    CHROMIUM,
    allow_orm_beside_playwright,
    browser,
    page,
)
from tests.factories import DEFAULT_PASSWORD

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
    pytest.mark.django_db(transaction=True),
]


def shot(tab: Any, name: str) -> None:
    folder = ARTIFACTS / "logged-out"
    folder.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def log_in_here(tab: Any, username: str) -> None:
    """On the login page a link led to: the demo user's name and password."""
    tab.get_by_label("Username").fill(username)
    tab.get_by_label("Password").fill(DEFAULT_PASSWORD)
    tab.get_by_role("button", name="Log in").click()


@pytest.mark.parametrize(
    ("path", "why", "there"),
    [
        (
            "/books/",
            "The books are for staff, or for anyone logged in while the demo runs.",
            "The audit's verdict",
        ),
        (
            "/chaos/",
            "The chaos panel is for staff and the demo users",
            "Chaos panel",
        ),
    ],
    ids=["books", "chaos"],
)
def test_a_page_that_needs_a_login_says_why_and_the_login_brings_the_visitor_back(
    page,  # noqa: F811 (the fixture of that name, imported above)
    live_server,
    alice,
    path,
    why,
    there,
):
    page.goto(f"{live_server.url}{path}")
    page.get_by_text(why).wait_for()
    shot(page, path.strip("/"))

    page.locator("#refused-login").get_by_role("link", name="Log in").click()
    log_in_here(page, alice.username)

    page.wait_for_url(f"{live_server.url}{path}")
    page.get_by_role("heading", name=there).first.wait_for()
    shot(page, f"{path.strip('/')}-after-login")


def test_the_story_is_on_the_home_page_with_a_login_that_leads_back_to_its_button(
    page,  # noqa: F811 (the fixture of that name, imported above)
    live_server,
    alice,
):
    page.goto(f"{live_server.url}/")
    story = page.locator("#story")
    story.get_by_role("heading", name="The guided story").wait_for()
    assert story.get_by_role("button", name="Run the story").count() == 0
    shot(page, "home-story")

    story.get_by_role("link", name="Log in to run the story").click()
    log_in_here(page, alice.username)

    page.wait_for_url(f"{live_server.url}/#story")
    page.locator("#story").get_by_role("button", name="Run the story").wait_for()
