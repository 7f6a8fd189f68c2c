"""README's top, as docs/design.md ("The reading path") asks: short, in both editions,
and its table of the four ideas one hop from the functions that do them.

Each row of "The four ideas" table links the file where the idea happens and names,
in the same cell, the functions there; every one of them must be defined in that
file, so the table cannot point at code that moved.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
READMES = {"README.md": "## The four ideas", "README.zh-CN.md": "## 四个要点"}
MAX_LINES = 250


@pytest.mark.parametrize("readme", sorted(READMES))
def test_the_readme_stays_short(readme):
    assert len((ROOT / readme).read_text().splitlines()) <= MAX_LINES


def _idea_rows(readme: str) -> list[list[str]]:
    text = (ROOT / readme).read_text()
    section = text[text.index(READMES[readme]) :]
    section = section[: section.index("\n## ", 1)]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "](" in line]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


@pytest.mark.parametrize("readme", sorted(READMES))
def test_each_of_the_four_ideas_links_the_file_and_functions_where_it_happens(readme):
    rows = _idea_rows(readme)

    assert len(rows) == 4
    for _idea, where, _look in rows:
        (path,) = re.findall(r"\]\(([^)#]+)\)", where)
        names = re.findall(r"`(\w+)`", where)
        source = (ROOT / path).read_text()
        assert names, where
        for name in names:
            assert re.search(rf"^def {name}\(", source, re.M), (path, name)
