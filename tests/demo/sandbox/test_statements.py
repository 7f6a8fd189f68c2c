"""GET /sandbox/v1/statements/{YYYY-MM-DD}: the day's settled charges and refunds as CSV."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from demo.sandbox import statements
from demo.sandbox.models import Charge, Refund
from demo.sandbox.statements import COLUMNS
from tests.demo.sandbox.conftest import charge_body, refund_body

pytestmark = pytest.mark.django_db

TODAY = "/sandbox/v1/statements/{day}"


def statement(client: APIClient, day: Any = None) -> list[list[str]]:
    response = client.get(TODAY.format(day=day or timezone.now().date()))
    assert response.status_code == 200, response.content
    assert response.streaming  # written as it is read, never built whole
    assert response["Content-Type"] == "text/csv"
    text = response.getvalue().decode()
    return list(csv.reader(io.StringIO(text)))


def test_lists_each_settled_charge_and_refund_of_the_day_once(merchant, charge, refund, paid):
    first, second = paid(1999), paid(500)
    assert refund(refund_body(first["out_trade_no"], amount=300)).json()["status"] == "SUCCESS"
    declined = charge(charge_body(amount=10**9))  # more than the wallet holds
    assert declined.json()["status"] == "DECLINED"

    rows = statement(merchant)

    assert tuple(rows[0]) == COLUMNS
    by_type = {(row[0], row[2]): row for row in rows[1:]}
    assert len(rows) == 4  # header, two charges, one refund; nothing for the decline
    charge_row = by_type[("charge", first["out_trade_no"])]
    assert charge_row[1] == first["trade_no"]
    assert charge_row[3:6] == ["1999", "CNY", "SUCCESS"]
    assert charge_row[6].endswith("Z")
    assert ("charge", second["out_trade_no"]) in by_type
    refund_row = next(row for row in rows[1:] if row[0] == "refund")
    assert refund_row[1] == Refund.objects.get().refund_id
    assert refund_row[3:6] == ["300", "CNY", "SUCCESS"]


def test_the_statement_streams_in_pieces_as_the_rows_are_read(merchant, paid, monkeypatch):
    # Given a day of 5 charges, and pieces of 2 lines (the cursor reads 2 rows at a time)
    monkeypatch.setattr(statements, "CHUNK_ROWS", 2)
    for _ in range(5):
        paid()

    response = merchant.get(TODAY.format(day=timezone.now().date()))

    # Then the body comes as the rows are read, never as one string
    pieces = [piece.decode() for piece in response.streaming_content]
    assert [piece.count("\n") for piece in pieces] == [2, 2, 2]
    assert pieces[0].startswith("type,provider_id,")


def test_another_day_lists_only_its_own(merchant, paid):
    made = paid()
    Charge.objects.filter(out_trade_no=made["out_trade_no"]).update(
        paid_at=timezone.now() - timedelta(days=1)
    )
    paid()

    assert len(statement(merchant, timezone.now().date() - timedelta(days=1))) == 2
    assert len(statement(merchant)) == 2


def test_an_empty_day_is_the_header_alone(merchant):
    assert statement(merchant, "2020-02-29") == [list(COLUMNS)]


@pytest.mark.parametrize("day", ["2026-13-01", "2026-02-30", "20260201", "2026-W05-1", "today"])
def test_a_day_that_is_not_a_date_is_a_400(merchant, day):
    response = merchant.get(TODAY.format(day=day))
    assert response.status_code == 400
    assert response.json()["code"] == "statement-date-invalid"


def test_only_a_merchant_gets_the_statement():
    response = APIClient().get(TODAY.format(day="2026-01-01"))
    assert response.status_code == 401
    assert response.json()["code"] == "merchant-unauthorized"
