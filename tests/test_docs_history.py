"""The docs state what is true, not the story of how it came to be.

A reader wants what the code does, how to measure it and on what machine, not a
work log ("this page used to report…", "Before:" / "Now:", "after the fixes
above"). A figure of older code is labelled with its date and commit instead
(docs/benchmarks.md, docs/reliability.md). This test fails on the phrases of a
work log in README*.md and docs/ (both languages); code blocks are left out (SQL's
``now()``). Where a phrase means something else — a charge "declined now" and
captured later, an order that "can no longer take" a capture — ``ALLOWED`` names
the whole phrase that may hold it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([*ROOT.glob("README*.md"), *(ROOT / "docs").rglob("*.md")])

# The words of a work log, in English (case-insensitive) and Chinese.
HISTORY = [
    re.compile(pattern, re.IGNORECASE | re.MULTILINE)
    for pattern in (
        r"(?<!\bis )(?<!\bare )(?<!\bbe )\bused to\b",
        r"\bno longer\b",
        r"\banymore\b",
        r"\b(?:before|after|since) the (?:fix|fixes|change|changes)\b",
        r"\bthe code (?:before|of that day)\b",
        r"\b(?:previously|formerly|hitherto)\b",
        r"\bnot (?:measured|re-measured|built|done) yet\b",
        r"\bsince then\b",
        # "an earlier run gave …", not "after any earlier run" (what a command copes with).
        r"\b(?:an|the) earlier (?:run|runs|version|figures|code|columns|state)\b",
        r"^\W*(?:#+\s*)?\**(?:before|now|after)\**\s*:",
        r"\bnow\b",
        # 现在 ("now"), not 出现在 ("appears in").
        r"修复[后前]|修复之后|以前|原先|此前|早先|曾经|(?<!出)现在|^\W*(?:#+\s*)?之前[\uff1a:]",
    )
]

# Whole phrases in which one of those words says something true about the code.
ALLOWED = [
    # The sandbox's late_success: declined now, carried out later.
    "declined now",
    "现在被拒",
    "现在拒绝",
    # The desk's actions, the reaper's command, a column that means "at this moment".
    "retry now",
    "key records now",
    "running it now",
    "the key exists now",
    "PENDING or UNKNOWN, now",
    "现在谁在跑",
    # The statement bench moves seeded rows from the current time to a past day.
    'from "now" to a past',
    '从"现在"挪到',
    # A lock holder fenced out, an order that cannot take a capture, a refund that does not fit.
    "can no longer",
    "no longer fits",
    # Earlier attempts and references of one order: the pay flow asks about them first.
    "以前的尝试",
    "以前用过",
    "曾经用过",
]


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of a Markdown file, its fenced code blocks left out."""
    lines: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def _allowed(line: str, start: int, end: int) -> bool:
    for phrase in ALLOWED:
        at = line.find(phrase)
        while at != -1:
            if at <= start and end <= at + len(phrase):
                return True
            at = line.find(phrase, at + 1)
    return False


def history_phrases(path: Path, root: Path = ROOT) -> list[str]:
    """Every work-log phrase of a Markdown file, in the order of its lines."""
    found = []
    for number, line in _prose(path):
        hits = sorted(
            (match for pattern in HISTORY for match in pattern.finditer(line)),
            key=lambda match: (match.start(), -match.end()),
        )
        end = -1
        for match in hits:  # one phrase, one entry: "**Now:" holds "Now" too
            if match.start() >= end and not _allowed(line, match.start(), match.end()):
                found.append(f"{path.relative_to(root)}:{number}: {match.group(0)!r}")
                end = match.end()
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_the_docs_state_what_is_true_not_how_it_came_to_be(path):
    assert history_phrases(path) == []


def test_the_phrases_of_a_work_log_are_found_and_their_legitimate_uses_are_not(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text(
        "The 0.95 this page used to report came from a loaded machine.\n"
        "### Before: one settlement per attempt\n"
        "**Now:** a batch.\n"
        "After the fixes above, the run was clean. It is now 503.\n"
        "An earlier run gave 16.4; it starts after any earlier run.\n"
        "Not measured yet: a crash.\n"
        "修复后又跑了一次。现在检查允许 3 秒。\n"
        "A charge declined now succeeds later; the order can no longer take it.\n"
        "A key is used to find the record, before the provider call.\n"
        "```sql\nINSERT … now()\n```\n",
        encoding="utf-8",
    )

    found = [entry.split(": ", 1)[1] for entry in history_phrases(doc, root=tmp_path)]

    assert found == [
        "'used to'",
        "'### Before:'",
        "'**Now:'",
        "'After the fixes'",
        "'now'",
        "'An earlier run'",
        "'Not measured yet'",
        "'修复后'",
        "'现在'",
    ]
