"""Every problem's ``type`` is a page: /problems/<code> describes the code."""

import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.templatetags.static import static
from django.test import Client
from django.utils.html import escape

from edge.errors import ApplicationError
from edge.problem_meanings import MEANINGS
from edge.problems import _subclasses, code_spans, problem_types
from payments.errors import OrderNotPayable
from tests.conftest import DEMO_PRESENT

pytestmark = pytest.mark.django_db


def test_every_code_the_api_answers_with_has_its_page():
    codes = {cls.code for cls in _subclasses(ApplicationError)}
    pages = Client()

    assert codes <= set(problem_types())
    for code in problem_types():
        page = pages.get(f"/problems/{code}")
        assert page.status_code == 200, code
        assert code in page.content.decode()


def test_every_code_declared_in_the_source_has_its_page():
    # Read from the files, not the imported classes: a module no URL imports, or a
    # code spelled outside ApplicationError, must not escape the catalogue.
    root = Path(__file__).resolve().parents[1]
    # The stand-in provider's codes too, where the demo is there (a fork may delete it).
    apps = ["edge", "config", "orders", "payments", "callbacks", "idempotency", "reconcile"]
    apps += ["demo/sandbox"] if (root / "demo").is_dir() else []
    declared = {
        code
        for app in apps
        for path in (root / app).rglob("*.py")
        for code in re.findall(r'^\s+code = "([a-z-]+)"', path.read_text(), re.M)
    }

    assert len(declared) > 30
    assert declared <= set(problem_types())


def test_a_problem_type_as_sent_opens_its_description():
    sent = OrderNotPayable().to_problem()["type"]

    page = Client().get(sent).content.decode()

    assert "Order not payable" in page
    assert "replayed to every retry with the same key" in page  # it is a final answer


def test_the_index_lists_every_code_and_an_unknown_code_is_a_404():
    pages = Client()

    index = pages.get("/problems/").content.decode()

    assert all(f'href="/problems/{code}"' in index for code in problem_types())
    assert pages.get("/problems/no-such-code").status_code == 404


@pytest.mark.demo  # the icon is the demo shop's, served with its pages
def test_the_favicon_leads_to_the_shop_icon():
    icon = Client().get("/favicon.ico")

    assert icon.status_code == 302
    assert icon["Location"] == static("storefront/favicon.svg")
    assert finders.find("storefront/favicon.svg")  # collected, then served by WhiteNoise


def test_every_code_has_a_meaning_written_for_whoever_received_it():
    found = problem_types()

    assert set(found) <= set(MEANINGS)  # none missing
    if DEMO_PRESENT:  # with the demo's sandbox codes too: none left over from a removed code
        assert set(MEANINGS) == set(found)
    for code, problem in found.items():
        assert problem.meaning == MEANINGS[code]
        assert "``" not in problem.meaning, code  # reStructuredText is the docstrings' markup
        assert "Base of" not in problem.meaning, code


@pytest.mark.parametrize(
    ("language", "meaning"),
    [
        ("en", "<code>detail</code> says what is wrong; fix the request"),
        ("zh-hans", "回答里的 <code>detail</code> 说明哪里不对"),
    ],
)
def test_a_problem_page_says_what_the_code_means_in_the_readers_language(language, meaning):
    page = Client(headers={"accept-language": language}).get("/problems/bad-request")

    assert meaning in page.content.decode()


def test_code_spans_keeps_text_that_is_already_escaped_as_it_is():
    # {% translate x as name %} hands a filter the escaped, safe string: escaping it
    # again would show "&#x27;" to the reader.
    once = escape("the key's record, `WHERE status = 'UNPAID'`")

    assert code_spans(once) == (
        "the key&#x27;s record, <code>WHERE status = &#x27;UNPAID&#x27;</code>"
    )
    assert code_spans("<b>`x`</b>") == "&lt;b&gt;<code>x</code>&lt;/b&gt;"
