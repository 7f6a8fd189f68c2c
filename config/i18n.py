"""The translation catalogues: read a .po file, compile it to the .mo Django loads.

    python -m config.i18n          # compile every locale/*/LC_MESSAGES/*.po that changed

Django's own ``compilemessages`` needs GNU gettext's ``msgfmt``, which a fresh
machine (or CI) may not have; the .mo format is a small, fixed binary layout, so
it is written here with the standard library and the build needs nothing more.
``make install`` runs this (and so do ``make test`` and ``make demo``, through
it, and the test session): compiled catalogues are build output, never committed.
``makemessages`` (xgettext) is only needed to *extract* new strings.
"""

from __future__ import annotations

import ast
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
_MAGIC = 0x950412DE
# Context and message are joined by EOT in a .mo key, as gettext does.
_CONTEXT_SEPARATOR = "\x04"


@dataclass(frozen=True)
class Entry:
    msgid: str
    msgstr: tuple[str, ...]  # one string, or one per plural form
    context: str | None = None
    plural: str | None = None
    fuzzy: bool = False

    @property
    def key(self) -> str:
        base = self.msgid if self.plural is None else f"{self.msgid}\0{self.plural}"
        return base if self.context is None else f"{self.context}{_CONTEXT_SEPARATOR}{base}"

    @property
    def translated(self) -> bool:
        return not self.fuzzy and all(self.msgstr)


def _unquote(text: str) -> str:
    # A .po string is a C string literal; its escapes (\" \\ \n \t) are Python's too.
    value = ast.literal_eval(text)
    if not isinstance(value, str):
        raise ValueError(f"not a string: {text!r}")
    return value


def parse(path: Path) -> list[Entry]:
    """The entries of a .po file, the header (msgid "") included; obsolete ones left out."""
    entries: list[Entry] = []
    fields: dict[str, str] = {}
    fuzzy = False
    current: str | None = None

    def flush() -> None:
        nonlocal fields, fuzzy, current
        if "msgid" in fields:
            forms = sorted(k for k in fields if k.startswith("msgstr["))
            msgstr = tuple(fields[k] for k in forms) if forms else (fields.get("msgstr", ""),)
            entries.append(
                Entry(
                    msgid=fields["msgid"],
                    msgstr=msgstr,
                    context=fields.get("msgctxt"),
                    plural=fields.get("msgid_plural"),
                    fuzzy=fuzzy,
                )
            )
        fields, fuzzy, current = {}, False, None

    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        try:
            if not line:
                flush()
            elif line.startswith("#"):
                # Comments, references, flags, obsolete (#~) entries: after a
                # msgstr, a comment begins the next entry.
                if current is not None and current.startswith("msgstr"):
                    flush()
                fuzzy = fuzzy or (line.startswith("#,") and "fuzzy" in line)
            elif line.startswith('"'):
                if current is None:
                    raise ValueError("a string continues nothing")
                fields[current] += _unquote(line)
            else:
                keyword, _, rest = line.partition(" ")
                if keyword in ("msgctxt", "msgid") and current and current.startswith("msgstr"):
                    flush()  # a new entry without the blank line between
                current = keyword
                fields[keyword] = _unquote(rest)
        except (ValueError, SyntaxError) as error:
            raise ValueError(f"{path}:{number}: {error}") from error
    flush()
    return entries


def mo_bytes(entries: list[Entry]) -> bytes:
    """The GNU .mo layout: header, two tables of (length, offset), then the strings.

    Untranslated and fuzzy entries are left out (gettext then falls back to the
    English msgid), but the header always goes in: it names the charset and the
    plural rule.
    """
    kept = {e.key: "\0".join(e.msgstr) for e in entries if e.translated or e.msgid == ""}
    keys = sorted(kept)
    originals = [k.encode() for k in keys]
    translations = [kept[k].encode() for k in keys]
    count = len(keys)
    header_size = 7 * 4
    strings_start = header_size + 2 * 8 * count
    tables: list[int] = []
    blob = b""
    for strings in (originals, translations):
        for data in strings:
            tables += [len(data), strings_start + len(blob)]
            blob += data + b"\0"
    header = struct.pack(
        "<7I", _MAGIC, 0, count, header_size, header_size + 8 * count, 0, strings_start
    )
    return header + struct.pack(f"<{len(tables)}I", *tables) + blob


def compile_catalogues(locale_dir: Path = LOCALE_DIR) -> list[Path]:
    """Compile every .po whose .mo is missing or older; return the .mo files written."""
    written = []
    for po in sorted(locale_dir.glob("*/LC_MESSAGES/*.po")):
        mo = po.with_suffix(".mo")
        if mo.exists() and mo.stat().st_mtime >= po.stat().st_mtime:
            continue
        # Written aside, then renamed: a server or a second test run reading the
        # catalogue meanwhile sees the old file or the new one, never half of one.
        partial = mo.with_suffix(f".mo.{os.getpid()}")
        partial.write_bytes(mo_bytes(parse(po)))
        os.replace(partial, mo)
        written.append(mo)
    return written


if __name__ == "__main__":
    for path in compile_catalogues():
        print(f"compiled {path.relative_to(LOCALE_DIR.parent)}", file=sys.stderr)
