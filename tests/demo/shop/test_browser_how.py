"""/how-it-works/ as a reader sees it, in Chromium, in both languages and at three widths.

What the HTML alone cannot tell: the text as rendered (no entity shown as
characters), where the browser breaks a path (never inside a word), and where
the state machine's labels land (clear of every arrow, arrowhead and box).
Screenshots under test-artifacts/storefront/how/.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.demo.shop.test_browser import (  # noqa: F401 (fixtures, used by name)
    ARTIFACTS,
    CHROMIUM,
    WAIT_MS,
    allow_orm_beside_playwright,
    browser,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
    pytest.mark.django_db(transaction=True),
]

# A desktop window, a narrow one, and a phone's.
WIDTHS = (1024, 700, 390)
# An HTML entity (&#x27; &#39; &amp; &lt;) among what the reader sees.
ENTITY = re.compile(r"&(?:#x?[0-9a-fA-F]+|[a-zA-Z]+);")
# A name may break after these and nowhere else: path and module separators, an
# identifier's underscores, a hyphen, and a list's comma or space.
SEPARATORS = "/._-, "

# For each <code> in the page's tables: the character before each line break.
BREAKS = """() => {
  const found = [];
  for (const code of document.querySelectorAll('table.where code, table.paths code')) {
    const text = code.textContent;
    let top = null;
    let at = 0;
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.length; i++, at++) {
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const rect = range.getBoundingClientRect();
        if (!rect.width) continue;
        if (top !== null && rect.top > top + 2) found.push([text, at]);
        top = rect.top;
      }
    }
  }
  return found;
}"""

# The state machine's geometry, in the SVG's own units.
GEOMETRY = """() => {
  const svg = document.querySelector('svg.fsm');
  const box = (b) => ({x: b.x, y: b.y, w: b.width, h: b.height});
  const labels = [...svg.querySelectorAll('text.edge-label')].map(
    (t) => ({name: t.textContent, ...box(t.getBBox())}));
  const states = [...svg.querySelectorAll('g.state rect')].map((r) => box(r.getBBox()));
  const marker = svg.querySelector('marker');
  const head = Number(marker.getAttribute('markerWidth')) * 1.5;  // x the stroke width
  const edges = [...svg.querySelectorAll('path.edge')].map((path) => {
    const length = path.getTotalLength();
    const points = [];
    for (let at = 0; at <= length; at += 1) {
      const p = path.getPointAtLength(at);
      points.push([p.x, p.y]);
    }
    const end = path.getPointAtLength(length);
    return {points, head: {x: end.x - head, y: end.y - head / 2, w: head, h: head}};
  });
  return {labels, states, edges};
}"""


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def _inside(point: list[float], box: dict[str, float], margin: float) -> bool:
    x, y = point
    return (
        box["x"] - margin <= x <= box["x"] + box["w"] + margin
        and box["y"] - margin <= y <= box["y"] + box["h"] + margin
    )


@pytest.fixture(
    params=[(language, width) for language in ("en-US", "zh-CN") for width in WIDTHS],
    ids=lambda param: f"{param[0]}-{param[1]}px",
)
def how(
    request: pytest.FixtureRequest,
    browser: Any,  # noqa: F811 (the fixture of that name, imported above)
    live_server: Any,
) -> Iterator[Any]:
    language, width = request.param
    context = browser.new_context(viewport={"width": width, "height": 900}, locale=language)
    context.set_default_timeout(WAIT_MS)
    tab = context.new_page()
    tab.goto(f"{live_server.url}/how-it-works/")
    folder = ARTIFACTS / "how"
    folder.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(folder / f"{language}-{width}.png"), full_page=True)
    tab.locator("svg.fsm").screenshot(path=str(folder / f"{language}-{width}-fsm.png"))
    try:
        yield tab
    finally:
        context.close()


def test_the_reader_sees_no_html_entity(how):
    text = how.locator("body").inner_text()

    assert ENTITY.findall(text) == []
    assert "WHERE status = 'UNPAID'" in text


def test_names_break_only_at_their_separators(how):
    breaks = how.evaluate(BREAKS)

    inside_a_word = [
        f"{text[:at]}|{text[at:]}" for text, at in breaks if text[at - 1] not in SEPARATORS
    ]
    assert inside_a_word == []


def test_each_transition_label_stays_clear_of_arrows_arrowheads_boxes_and_other_labels(how):
    drawn = how.evaluate(GEOMETRY)
    labels, states, edges = drawn["labels"], drawn["states"], drawn["edges"]

    assert {label["name"] for label in labels} >= {"mark_paid()", "mark_refunded()", "cancel()"}
    for label in labels:
        name = label["name"]
        assert not [s for s in states if _overlap(label, s)], f"{name} runs into a state"
        assert not [e for e in edges if _overlap(label, e["head"])], f"{name} runs into a head"
        # Half the stroke's width, and a little air.
        assert not [e for e in edges if any(_inside(p, label, 1.5) for p in e["points"])], (
            f"{name} runs into an arrow"
        )
        others = [other for other in labels if other is not label and _overlap(label, other)]
        assert not others, f"{name} runs into {others}"
