"""config/i18n.py: the .po reader and the pure-Python .mo compiler.

The compiled file is read back with the standard library's gettext, the reader
Django itself uses, so a layout mistake fails here rather than as English pages.
"""

import gettext
import io
import os
import re
from pathlib import Path

from config.i18n import LOCALE_DIR, compile_catalogues, mo_bytes, parse

PO = r"""# A comment
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=1; plural=0;\n"

#: demo/shop/templates/storefront/base.html
msgid "Log out"
msgstr "退出登录"

msgid ""
"A long "
"message with \"quotes\"\n"
msgstr "一条很长的"
"消息 \"引号\"\n"

msgctxt "button"
msgid "Pay"
msgstr "支付"

msgid "%(count)s order"
msgid_plural "%(count)s orders"
msgstr[0] "%(count)s 张订单"

#, fuzzy
msgid "Not sure"
msgstr "不确定"

msgid "Not yet"
msgstr ""

#~ msgid "Gone"
#~ msgstr "没了"
"""


def _catalogue(tmp_path: Path) -> gettext.GNUTranslations:
    po = tmp_path / "django.po"
    po.write_text(PO, encoding="utf-8")
    return gettext.GNUTranslations(io.BytesIO(mo_bytes(parse(po))))


def test_translated_entries_are_found_by_gettext(tmp_path):
    catalogue = _catalogue(tmp_path)

    assert catalogue.gettext("Log out") == "退出登录"
    assert catalogue.gettext('A long message with "quotes"\n') == '一条很长的消息 "引号"\n'
    assert catalogue.pgettext("button", "Pay") == "支付"
    assert catalogue.gettext("Pay") == "Pay"  # without its context it is another message
    assert catalogue.ngettext("%(count)s order", "%(count)s orders", 5) == "%(count)s 张订单"


def test_fuzzy_untranslated_and_obsolete_entries_stay_english(tmp_path):
    catalogue = _catalogue(tmp_path)

    assert catalogue.gettext("Not sure") == "Not sure"
    assert catalogue.gettext("Not yet") == "Not yet"
    assert catalogue.gettext("Gone") == "Gone"
    assert catalogue.info()["plural-forms"] == "nplurals=1; plural=0;"


def test_parse_keeps_flags_and_leaves_obsolete_entries_out(tmp_path):
    po = tmp_path / "django.po"
    po.write_text(PO, encoding="utf-8")

    entries = {e.key: e for e in parse(po)}

    assert entries["Not sure"].fuzzy
    assert not entries["Not sure"].translated
    assert not entries["Not yet"].translated
    assert entries["Log out"].translated
    assert "Gone" not in entries


def test_only_changed_catalogues_are_compiled(tmp_path):
    messages = tmp_path / "zh_Hans" / "LC_MESSAGES"
    messages.mkdir(parents=True)
    (messages / "django.po").write_text(PO, encoding="utf-8")

    assert compile_catalogues(tmp_path) == [messages / "django.mo"]
    assert compile_catalogues(tmp_path) == []
    os.utime(messages / "django.po", (1e10, 1e10))  # edited after the last compile
    assert compile_catalogues(tmp_path) == [messages / "django.mo"]
    # Written aside and renamed: no partial file is left behind.
    assert sorted(p.name for p in messages.iterdir()) == ["django.mo", "django.po"]


def test_the_projects_chinese_catalogue_parses_and_is_compiled():
    po = LOCALE_DIR / "zh_Hans" / "LC_MESSAGES" / "django.po"

    entries = parse(po)

    assert len(entries) > 100
    assert po.with_suffix(".mo").exists(), "the test session compiles it (tests/conftest.py)"


def test_every_chinese_translation_keeps_the_placeholders_of_its_message():
    # A placeholder lost or invented in a translation is a KeyError (or a missing
    # value) at render time, in Chinese only: gettext does not check it, so this does.
    placeholder = re.compile(r"%\((\w+)\)[sdr]")
    wrong = {
        entry.key: entry.msgstr
        for entry in parse(LOCALE_DIR / "zh_Hans" / "LC_MESSAGES" / "django.po")
        if entry.msgid
        and entry.translated
        and any(
            set(placeholder.findall(text)) != set(placeholder.findall(entry.msgid))
            for text in entry.msgstr
        )
    }
    assert not wrong
