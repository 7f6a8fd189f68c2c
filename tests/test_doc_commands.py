"""Every command the docs tell a reader to type exists: ``make`` targets with the
variables written after them, and ``manage.py`` commands.

Read from the code in README.md, README.zh-CN.md and docs/ (inline code and
fenced blocks, never prose): a ``make TARGET VAR=value`` must be accepted by
``make -n``, and each variable must reach what it is for, either the recipe
(its value is in the commands make would run) or the program, which reads it
from the environment make exports command-line variables to.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from functools import cache
from pathlib import Path

import pytest
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "README.zh-CN.md", *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`\n]+)`")
MAKE = re.compile(r"(?:^|[\s;(&|])make ([a-z][\w-]*)(.*)")
MANAGE = re.compile(r"manage\.py ([a-z][a-z0-9_]*)")
ASSIGNMENT = re.compile(r"([A-Z][A-Z0-9_]*)=(.*)", re.DOTALL)


def code_lines(text: str) -> list[str]:
    """Each line of every fenced block (comments dropped), then every inline span."""
    lines = []
    for block in FENCE.findall(text):
        lines += [line.split(" # ")[0] for line in block.splitlines()]
    prose = FENCE.sub("", text)
    lines += INLINE.findall(prose)
    return lines


def _words(rest: str) -> list[str]:
    try:
        return shlex.split(rest)
    except ValueError:  # an unclosed quote: the span ends inside the command
        return rest.split()


Command = tuple[str, tuple[str, ...]]  # a make target and the words written after it

SHELL_OPERATORS = {";", "&&", "||", "|", ")", "&"}


def make_commands_in(text: str) -> set[Command]:
    """Every ``make TARGET ...`` in ``text``'s code, with the words after the target."""
    found = set()
    for line in code_lines(text):
        for match in MAKE.finditer(line):
            words: list[str] = []
            for word in _words(match.group(2)):
                if word in SHELL_OPERATORS:
                    break
                words.append(word)
            found.add((match.group(1), tuple(words)))
    return found


def make_commands() -> list[tuple[str, tuple[str, ...], str]]:
    """(target, words after it, the document) for every ``make`` in the docs' code."""
    return sorted(
        (target, words, doc.relative_to(ROOT).as_posix())
        for doc in DOCS
        for target, words in make_commands_in(doc.read_text())
    )


def manage_commands() -> set[tuple[str, str]]:
    return {
        (name, doc.relative_to(ROOT).as_posix())
        for doc in DOCS
        for line in code_lines(doc.read_text())
        for name in MANAGE.findall(line)
    }


@cache
def _python_sources() -> str:
    skip = {".venv", ".var", "node_modules", "tests"}
    files = [p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)]
    return "\n".join(path.read_text() for path in files)


def _dry_run(target: str, words: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, *words],  # noqa: S607
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_docs_write_make_and_manage_commands_at_all():
    targets = {target for target, _words, _doc in make_commands()}
    assert {"demo", "test", "lab", "bench", "reconcile", "alerts"} <= targets
    assert {"audit", "reconcile"} <= {name for name, _doc in manage_commands()}


def test_a_program_option_given_to_make_is_caught():
    # `make bench --suite peers` is what make itself rejects.
    [(target, words)] = make_commands_in("run `make bench --suite peers` for the peers")
    assert (target, words) == ("bench", ("--suite", "peers"))
    assert _dry_run(target, words).returncode != 0


@pytest.mark.parametrize(("target", "words", "doc"), make_commands())
def test_every_make_command_in_the_docs_runs(target, words, doc):
    dry = _dry_run(target, words)
    assert dry.returncode == 0, f"{doc}: make {shlex.join([target, *words])}: {dry.stderr}"
    # A variable a recipe line reads must show in the dry run; one the Makefile reads only
    # to choose a prerequisite (PAYMENT_PROVIDER picks the lock) reaches the program
    # through the environment, and the code must read it.
    recipes = "\n".join(
        line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("\t")
    )
    for word in words:
        assignment = ASSIGNMENT.fullmatch(word)
        assert assignment, f"{doc}: make {target} {word}: not a VAR=value"
        name, value = assignment.groups()
        if f"$({name})" in recipes:
            assert value in dry.stdout, f"{doc}: make {target} {word}: the recipe ignores it"
        else:
            read = f'"{name}"' in _python_sources()
            assert read, f"{doc}: make {target} {word}: neither the Makefile nor the code reads it"


@pytest.mark.parametrize(("name", "doc"), sorted(manage_commands()))
def test_every_manage_py_command_in_the_docs_exists(name, doc):
    assert name in get_commands(), f"{doc}: manage.py {name}"
