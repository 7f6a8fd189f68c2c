"""The story's button in Chromium: while the story runs the button is disabled, the
page counts the seconds, and a second submit sends nothing.

The story is held in its first chapter until the test has tried again (a real one
runs for 12-13 s; tests/demo/shop/test_story.py runs it whole), so the window in
which a second click could land is as long as the test needs, and no longer.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import pytest

from demo.shop.story import StoryUnavailable
from tests.demo.shop.test_browser import (  # noqa: F401 (fixtures, used by name)
    ARTIFACTS,
    CHROMIUM,
    allow_orm_beside_playwright,
    browser,
    log_in,
    page,
)

# While the form's post is pending, Playwright waits for that navigation before it
# reads the page; the page reports on itself instead, on the console. Each change
# of the status line is logged with the button's state, and once the story runs,
# the page tries a second submit (as Enter in the form or a script would send it).
WATCH = """document.addEventListener("DOMContentLoaded", () => {
  const form = document.querySelector("#story form");
  if (!form) return;
  const status = form.querySelector("[data-story-status]");
  const button = form.querySelector("button");
  let tried = false;
  new MutationObserver(() => {
    console.log("story " + JSON.stringify(
      {status: status.textContent, disabled: button.disabled, text: button.textContent}));
    if (!tried && status.textContent) {
      tried = true;
      form.requestSubmit();
      console.log("story second submit tried");
    }
  }).observe(status, {childList: true, characterData: true, subtree: true});
});"""


pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
    pytest.mark.django_db(transaction=True),
]


def test_the_button_shows_progress_and_a_second_submit_sends_nothing(
    page,  # noqa: F811 (the fixture of that name, imported above)
    live_server,
    alice,
    monkeypatch,
):
    started, finish = threading.Event(), threading.Event()

    def first_chapter(_scene: Any) -> None:
        started.set()
        finish.wait(timeout=60)
        raise StoryUnavailable("Held by the test, then stopped.")

    monkeypatch.setattr("demo.shop.story.scenario_run", first_chapter)
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    page.add_init_script(WATCH)
    log_in(page, live_server.url, alice.username)
    button = page.locator("#story").get_by_role("button", name="Run the story")

    # Clicked from the page: Playwright's own click would wait for the navigation,
    # which the held story keeps from coming.
    with page.expect_console_message(lambda m: m.text == "story second submit tried"):
        button.evaluate("button => button.click()")
    counted = page.wait_for_event("console", lambda m: re.search(r"running: [1-9]\d* s", m.text))

    assert started.wait(timeout=30)  # the server runs it
    state = json.loads(counted.text.removeprefix("story "))
    assert re.fullmatch(r"The story is running: \d+ s of about 15 s\. .+", state["status"])
    assert (state["disabled"], state["text"]) == (True, "Running…")
    finish.set()
    page.wait_for_url(f"{live_server.url}/story/")
    page.get_by_text("Held by the test, then stopped.").wait_for()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "story-after-the-held-run.png"), full_page=True)
    # One post: the second submit left nothing.
    assert [url for url in posts if url.endswith("/story/")] == [f"{live_server.url}/story/"]
