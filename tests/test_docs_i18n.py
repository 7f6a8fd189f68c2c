"""The Chinese edition of the docs: every English doc has a twin, linked both ways.

A doc in docs/ without a twin in docs/zh-CN/, a missing link between the two,
or a relative link that leads nowhere (a file, or a heading of a Markdown file)
fails here. The Chinese pages also name tests; each named test must exist.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
ZH = DOCS / "zh-CN"

# (English, Chinese) pairs: every Markdown file of docs/, and the README.
PAIRS = [(path, ZH / path.name) for path in sorted(DOCS.glob("*.md"))] + [
    (ROOT / "README.md", ROOT / "README.zh-CN.md")
]
CHINESE = [*sorted(ZH.glob("*.md")), ROOT / "README.zh-CN.md"]

# Chinese twins written ahead of their English doc, which another branch adds: their
# link back is checked once the English doc is in the tree. When it is, this test
# says so and the entry goes (a twin can never stay pending unnoticed).
PENDING_ENGLISH = {"operating.md", "reliability.md"}

# [text](target) — inline Markdown links; images and absolute URLs are left out.
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
# A test named in full: tests/…/test_x.py::test_name (an elided "…" name is not checked).
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def _anchor(heading: str) -> str:
    """GitHub's heading id: lower case, punctuation dropped (CJK kept), spaces to dashes."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def _pending(source: Path, target: Path) -> bool:
    """A link from a Chinese twin to its English doc that is still to come."""
    return source.parent == ZH and target == DOCS / source.name and source.name in PENDING_ENGLISH


def _links_to(source: Path, target: Path) -> bool:
    return any(
        (source.parent / link.split("#")[0]).resolve() == target.resolve()
        for link in _links(source)
    )


@pytest.mark.parametrize(("english", "chinese"), PAIRS, ids=[_name(e) for e, _ in PAIRS])
def test_every_english_doc_has_a_chinese_twin_linked_both_ways(english, chinese):
    assert chinese.exists(), f"{_name(english)} has no Chinese twin {_name(chinese)}"
    assert _links_to(english, chinese), f"{_name(english)} does not link {_name(chinese)}"
    assert _links_to(chinese, english), f"{_name(chinese)} does not link {_name(english)}"


@pytest.mark.parametrize("path", CHINESE, ids=_name)
def test_every_relative_link_of_the_chinese_docs_leads_somewhere(path):
    broken = []
    for link in _links(path):
        file_part, _, anchor = link.partition("#")
        target = (path.parent / file_part).resolve() if file_part else path
        if _pending(path, target):
            continue
        if not target.exists() or (
            anchor and target.suffix == ".md" and anchor not in _anchors(target)
        ):
            broken.append(link)
    assert not broken, f"{_name(path)}: broken links {broken}"


@pytest.mark.parametrize("path", CHINESE, ids=_name)
def test_every_test_the_chinese_docs_name_exists(path):
    missing = []
    for file, test in TEST_REF.findall(path.read_text(encoding="utf-8")):
        source = ROOT / file
        if not source.exists() or not re.search(rf"def {test}\(", source.read_text()):
            missing.append(f"{file}::{test}")
    assert not missing, f"{_name(path)} names tests that do not exist: {missing}"


def test_the_anchor_rule_matches_the_headings_it_is_used_on():
    assert _anchor("Results") == "results"
    assert _anchor("行为矩阵与测试一一对应") == "行为矩阵与测试一一对应"
    assert _anchor("The idempotency contract (published)") == "the-idempotency-contract-published"


def test_pending_twins_are_exactly_those_whose_english_doc_is_not_here_yet():
    for name in PENDING_ENGLISH:
        assert (ZH / name).exists(), f"docs/zh-CN/{name} is listed as pending but missing"
        assert not (DOCS / name).exists(), (
            f"docs/{name} is here now: remove it from PENDING_ENGLISH and link it to "
            f"zh-CN/{name} (the twin test then checks both directions)"
        )
