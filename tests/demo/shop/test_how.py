"""How it works: the behaviour matrix and the state machine, both read from the code."""

import pytest
from django.test import Client

from demo.shop.diagram import order_state_machine
from demo.shop.matrix import behaviour_matrix
from idempotency.errors import IdempotencyKeyInUse, IdempotencyKeyMismatch
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
    assert set(machine.finals) == {"REFUNDED", "CANCELLED"}
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
