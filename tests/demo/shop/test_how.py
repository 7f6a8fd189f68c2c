"""How it works: the behaviour matrix and the state machine, both read from the code."""

import html
import re

import pytest
from django.test import Client

from demo.shop.diagram import order_state_machine
from demo.shop.matrix import behaviour_matrix
from idempotency.errors import IdempotencyKeyInUse, IdempotencyKeyMismatch
from operations.audit.run import audit_run
from orders.models import Order
from payments.errors import PaymentOutcomeUnknown

pytestmark = pytest.mark.django_db


def test_the_matrix_has_every_row_of_the_design_with_codes_from_the_errors():
    page = Client().get("/how-it-works/").content.decode()

    assert len(behaviour_matrix()) == 11
    for error in (IdempotencyKeyInUse, IdempotencyKeyMismatch, PaymentOutcomeUnknown):
        assert f"{error.status} {error.code}" in page
    assert "same key, request still in flight (lock held)" in page


def test_the_state_machine_is_drawn_from_the_declared_transitions():
    field = Order._meta.get_field("status")
    declared = {(t.source, t.name, t.target) for t in field.get_all_transitions(Order)}

    machine = order_state_machine()
    page = Client().get("/how-it-works/").content.decode()

    assert {(a.source, a.name, a.target) for a in machine.arrows} == declared
    assert machine.initial == "UNPAID"
    # A refund the provider reverses takes the order back to PAID: only CANCELLED ends.
    assert set(machine.finals) == {"CANCELLED"}
    assert ("REFUNDED", "mark_unrefunded", "PAID") in declared
    assert '<svg class="fsm" role="img"' in page
    for source, name, target in declared:
        assert f"<td>{source}</td><td><code>{name}()</code></td><td>{target}</td>" in page


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_concept_column_shows_code_not_markdown_backticks(language):
    page = Client(headers={"accept-language": language}).get("/how-it-works/").content.decode()
    where = page[
        page.index('<table class="where">') : page.index("</table>", page.index('class="where"'))
    ]

    assert f'<html lang="{language}">' in page
    assert "`" not in where
    assert "<code>Idempotent-Replayed</code>" in where
    assert "<code>SET NX EX</code>" in where


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_no_text_on_the_page_is_escaped_twice(language):
    # An apostrophe in a translated concept ("the key's record", 'UNPAID') is one
    # entity in the HTML, which the browser shows as the character; escaped a second
    # time, the reader sees "&#x27;" itself.
    page = Client(headers={"accept-language": language}).get("/how-it-works/").content.decode()

    assert "&amp;#" not in page
    assert "&amp;amp;" not in page
    assert "<code>UPDATE … WHERE status = &#x27;UNPAID&#x27;</code>" in page


@pytest.mark.django_db(transaction=True)
def test_the_audit_checks_listed_are_the_ones_a_run_makes_and_their_number_is_counted(sandbox):
    # Derived from the run's own list (plug-ins included), never written down: a check
    # added to the audit shows here, and in the number the heading states.
    report = audit_run()
    page = Client().get("/how-it-works/").content.decode()
    table = page[page.index('<table id="audit-checks"') :]
    table = table[: table.index("</table>")]

    listed = re.findall(r'<th scope="row">([^<]+)</th>', table)
    assert [html.unescape(title) for title in listed] == [row.check for row in report.summary]
    assert f"The audit's {len(report.summary)} checks" in page
    assert "provider: charges and net debits match the ledger" in listed
