"""The API tour (docs/api.md), run as written against a live shop, and its outputs checked.

Both editions: the Chinese page's tour is the same commands with Chinese prose,
so a reader of either sees the same replays.

Every ```sh block of "A tour of the API" runs, in order, in one bash (as a reader
pastes them into one shell), with the shop's URL replaced by the live server's.
Each ```text block that follows is what the page claims those commands print:
each of its lines must be printed, ``…`` standing for whatever varies.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[1]
TOURS = {"docs/api.md": "## A tour of the API", "docs/zh-CN/api.md": "## API 快速体验"}
DEMO_URL = "http://127.0.0.1:8000"
BASH = shutil.which("bash") or "/bin/bash"
BLOCK = re.compile(r"```(sh|text)\n(.*?)```", re.S)

pytestmark = pytest.mark.django_db(transaction=True)


def tour_blocks(page: str) -> list[tuple[str, str]]:
    text = (ROOT / page).read_text()
    tour = TOURS[page]
    section = text[text.index(tour) :]
    section = section[: section.index("\n## ", len(tour))]
    return BLOCK.findall(section)


def run_tour(blocks: list[tuple[str, str]], shop_url: str) -> list[str]:
    """Run the sh blocks in one shell; return each block's output."""
    marker = "--- end of block ---"
    script = "set -euo pipefail\n" + "".join(
        f"{code.replace(DEMO_URL, shop_url)}\necho '{marker}'\n"
        for kind, code in blocks
        if kind == "sh"
    )
    done = subprocess.run(
        [BASH, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.replace("\r", "").split(marker + "\n")[:-1]


def claimed(line: str) -> re.Pattern[str]:
    return re.compile("^" + ".*".join(re.escape(part) for part in line.split("…")) + "$")


@pytest.mark.parametrize("page", sorted(TOURS))
def test_every_command_of_the_tour_prints_what_the_page_shows(sandbox, live_server, page):
    call_command("seed_demo", stdout=None)  # alice and the catalogue, as make demo seeds
    blocks = tour_blocks(page)
    assert DEMO_URL in blocks[0][1]

    outputs = iter(run_tour(blocks, live_server.url))
    printed: list[str] = []
    checked = 0
    for kind, code in blocks:
        if kind == "sh":
            printed += next(outputs).splitlines()
            continue
        for line in code.splitlines():
            pattern = claimed(line)
            assert any(pattern.match(out) for out in printed), (line, printed)
            checked += 1
        printed = []
    # The claims the tour is for: both replays say so, and the order was paid once.
    assert checked >= 14
    replays = [block for kind, block in blocks if kind == "text" and "Replayed: true" in block]
    assert len(replays) == 2


def test_both_editions_tour_with_the_same_commands():
    def commands(page: str) -> list[str]:
        return [code for kind, code in tour_blocks(page) if kind == "sh"]

    assert commands("docs/zh-CN/api.md") == commands("docs/api.md")
