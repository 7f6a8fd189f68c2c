"""Every file and test the docs and the code's comments name exists.

A reference is a repository path with a file suffix (``payments/flows.py``,
``docs/operating.md``) or a test id (``tests/payments/test_refund_api.py::test_x``),
found in the README, every Markdown file of the repository, and the comments and
docstrings of its Python code. A path under one of the repository's top folders must
exist exactly as written. A path that starts elsewhere (``checks/captures.py``) is read
relative to the file that names it, or to the folders that file names in full in its
own text (a doc about ``reconcile/`` may go on with ``checks/captures.py``); nothing else
is guessed. A test id must name a function or class that the test file defines
(parametrized ids ``[...]`` are dropped); the docs' short forms are read as their
tables use them: ``test_q1_…`` is a prefix, ``…/test_pay_races.py`` the one file named
so, ``tests/consumers/…::test_x`` a test of some file in that folder, and ``…::test_x``
a test of the file the reference before it named. Every relative Markdown link must
lead to a file, and to a heading of it when it names one.

Fenced blocks of Markdown (shell sessions, output, trees of the layout) are not read:
their paths are examples. The project's design document is ``docs/design.md``; a
mention of the old external contract file fails too.
"""

from __future__ import annotations

import ast
import os
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve()
# Spelled in two parts so this file does not name it.
OLD_CONTRACT = "DESIGN" + ".md"
ELLIPSIS = "…"

SUFFIXES = "py|md|html|txt|yml|yaml|toml|json|cfg|ini|lock|sh|po|css|js|sql|conf|csv"
# A path: segments of word characters, dots and dashes, at least one slash, a suffix.
PATH = re.compile(
    rf"(?<![\w/.:~-])(?:{ELLIPSIS}/)?(?:[\w.-]+/)+[\w.-]+\.(?:{SUFFIXES})(?![\w/-])"
    rf"(?:::[\w{ELLIPSIS}]+(?:::[\w{ELLIPSIS}]+)?)?"
)
# A test named by its file's short form alone: "…::test_x" (the file of the reference before).
SAME_FILE_TEST = re.compile(rf"(?<![\w./]){ELLIPSIS}::([\w{ELLIPSIS}]+)")
# A test in some file of a folder: "tests/consumers/…::test_x".
FOLDER_TEST = re.compile(rf"(?<![\w/.-])((?:[\w-]+/)+){ELLIPSIS}::([\w{ELLIPSIS}]+)")
TRIPLE_QUOTED = re.compile(r'"""(.*?)"""', re.DOTALL)
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
# Folders named in full in a text, for the relative paths that follow them.
FOLDER = re.compile(r"(?<![\w/.-])((?:[\w-]+/)+)")
# Paths that are never the repository's: runtime state, the venv, the reading list, URLs.
OUTSIDE = (".var/", ".venv/", "reading/", "/", "~", "http")
# What runs write (bench/out/results.md): the folders .gitignore keeps out of the tree.
OUTPUTS = tuple(
    line.strip()
    for line in (ROOT / ".gitignore").read_text().splitlines()
    if line.strip().endswith("/") and "/" in line.strip()[:-1]
)


# Folders that are not the project's text: tools' caches, the venv, what runs leave behind.
SKIP = {".git", ".venv", ".var", "__pycache__", "node_modules", "test-artifacts", "staticfiles"}


def _files() -> list[Path]:
    """The repository's files (no git needed: a fork may be a plain copy)."""
    found = []
    for folder, subfolders, names in os.walk(ROOT):
        here = Path(folder)
        subfolders[:] = [
            s
            for s in subfolders
            if s not in SKIP
            and not s.startswith(".")
            and not s.endswith(".egg-info")
            and not (here / s).relative_to(ROOT).as_posix().startswith(OUTPUTS)
        ]
        found += [here / name for name in names]
    return found


FILES = _files()
ROOTS = {p.relative_to(ROOT).parts[0] for p in FILES if len(p.relative_to(ROOT).parts) > 1}
MARKDOWN = [p for p in FILES if p.suffix == ".md"]
PYTHON = [p for p in FILES if p.suffix == ".py"]


def _python_prose(path: Path) -> str:
    """The comments and docstrings of a Python file."""
    source = path.read_text(encoding="utf-8")
    if not PATH.search(source) and f"{ELLIPSIS}::" not in source:
        return ""  # nothing to find: spare the parser (most modules)
    # Comments as written here: a line of its own, or after code and two spaces
    # (what ruff's formatter leaves); the tokenizer would be exact and ten times slower.
    parts = [
        line.strip() if line.lstrip().startswith("#") else line.split("  # ", 1)[1]
        for line in source.splitlines()
        if line.lstrip().startswith("#") or "  # " in line
    ]
    # Docstrings, and any other triple-quoted text (parsing every module for its
    # docstrings alone would cost most of this test's time).
    parts += TRIPLE_QUOTED.findall(source)
    return "\n".join(parts)


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _statements(tree: ast.Module) -> list[ast.AST]:
    """The module and every statement in it, at any depth (expressions are not entered)."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        found.append(node)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            stack.extend(c for c in getattr(node, field, ()) if isinstance(c, ast.AST))
    return found


def _prose(path: Path) -> str:
    if path.suffix == ".md":
        return FENCE.sub("", path.read_text(encoding="utf-8"))
    return _python_prose(path)


@cache
def _defined_names(test_file: Path) -> frozenset[str]:
    kinds = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    return frozenset(n.name for n in _statements(_tree(test_file)) if isinstance(n, kinds))


def _test_exists(test_file: Path, names: list[str]) -> bool:
    defined = _defined_names(test_file)
    for name in names:
        name = name.split("[")[0]
        if name.endswith(ELLIPSIS):
            if not any(d.startswith(name[: -len(ELLIPSIS)]) for d in defined):
                return False
        elif name not in defined:
            return False
    return True


def _resolve(path: str, source: Path, folders: list[str]) -> Path | None:
    """The repository file a path names, read as the rules of the module docstring say."""
    if path.startswith(ELLIPSIS + "/"):
        tail = path[len(ELLIPSIS) + 1 :]
        found = [p for p in FILES if p.relative_to(ROOT).as_posix().endswith("/" + tail)]
        return found[0] if len(found) == 1 else None
    if path.split("/")[0] in ROOTS or (ROOT / path).exists():
        return ROOT / path if (ROOT / path).is_file() else None
    for base in [source.parent, *(ROOT / f for f in folders)]:
        if (base / path).is_file():
            return (base / path).resolve()
    return None


def _broken(source: Path) -> list[str]:
    text = _prose(source)
    folders = [f for f in FOLDER.findall(text) if f.split("/")[0] in ROOTS]
    broken = []
    last_test_file: Path | None = None
    # Both kinds in the order they are written, so "…::test_x" finds the file before it.
    tokens = sorted(
        [(m.start(), m.group(0), False) for m in PATH.finditer(text)]
        + [(m.start(), m.group(1), True) for m in SAME_FILE_TEST.finditer(text)]
        + [(m.start(), m.group(0), True) for m in FOLDER_TEST.finditer(text)]
    )
    for _, token, elided in tokens:
        if elided and "/" in token:
            folder, _, name = token.partition(f"{ELLIPSIS}::")
            if not any(
                _test_exists(p, [name])
                for p in PYTHON
                if p.relative_to(ROOT).as_posix().startswith(folder) and p.name.startswith("test")
            ):
                broken.append(token)
            continue
        if elided:
            if last_test_file is None or not _test_exists(last_test_file, [token]):
                broken.append(f"{ELLIPSIS}::{token}")
            continue
        path, *names = token.split("::")
        if path.startswith(OUTSIDE + OUTPUTS):
            continue
        target = _resolve(path, source, folders)
        if target is None:
            broken.append(token)
            continue
        if target.suffix == ".py" and target.name.startswith("test"):
            last_test_file = target
            if names and not _test_exists(target, names):
                broken.append(token)
    return broken


def test_every_file_and_test_named_in_docs_and_comments_exists():
    sources = [p for p in MARKDOWN + PYTHON if p != THIS]
    broken = {str(p.relative_to(ROOT)): found for p in sources if (found := _broken(p))}
    assert not broken, f"references to files or tests that do not exist: {broken}"


# [text](target): inline Markdown links; images and absolute URLs are left out.
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's heading id: lower case, punctuation dropped (CJK kept), spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def _anchors(path: Path) -> frozenset[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return frozenset(_anchor(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE))


def test_every_relative_link_of_every_doc_leads_somewhere():
    broken: dict[str, list[str]] = {}
    for doc in MARKDOWN:
        for link in LINK.findall(FENCE.sub("", doc.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", link):
                continue
            file_part, _, anchor = link.partition("#")
            target = (doc.parent / file_part).resolve() if file_part else doc
            if not target.exists() or (
                anchor and target.suffix == ".md" and anchor not in _anchors(target)
            ):
                broken.setdefault(str(doc.relative_to(ROOT)), []).append(link)
    assert not broken, f"links that lead nowhere: {broken}"


def test_nothing_cites_the_old_external_contract_file():
    suffixes = {".py", ".md", ".html", ".txt", ".yml", ".yaml", ".json", ".po", ".toml"}
    citing = [
        str(p.relative_to(ROOT))
        for p in FILES
        if p.suffix in suffixes and p != THIS and OLD_CONTRACT in p.read_text(encoding="utf-8")
    ]
    assert not citing, f"cite docs/design.md instead of {OLD_CONTRACT}: {citing}"


def test_the_reader_finds_what_it_must():
    """The rules above, on made-up text: each kind of reference found, each fault caught."""
    source = ROOT / "docs" / "design.md"
    text = (
        "`payments/flows.py` and docs/audit.md; see `checks/captures.py` after `operations/audit/`;"
        " `tests/test_docs_references.py::test_nothing_cites_the_old_external_contract_file`"
        " then `…::test_the_reader_finds_what_it_must[one]` and `…::test_every_file_…`"
    )
    found = [m.group(0) for m in PATH.finditer(text)]
    assert found[:3] == ["payments/flows.py", "docs/audit.md", "checks/captures.py"]
    assert [m.group(1) for m in SAME_FILE_TEST.finditer(text)] == [
        "test_the_reader_finds_what_it_must",
        "test_every_file_…",
    ]
    assert (
        _resolve("checks/captures.py", source, ["operations/audit/"])
        == ROOT / "operations/audit/checks/captures.py"
    )
    assert _resolve("checks/captures.py", source, []) is None
    assert _resolve("payments/no_such_module.py", source, []) is None
    assert _test_exists(THIS, ["test_the_reader_finds_what_it_must[one]"])
    assert not _test_exists(THIS, ["test_that_was_renamed"])
    assert not _test_exists(THIS, ["test_nobody_…"])
