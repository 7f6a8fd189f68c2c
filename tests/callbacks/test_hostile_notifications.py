"""Issue 11: hostile notifications are a 400 with a code, never a 500, and nothing is stored.

The signature-header cases are unauthenticated (anyone can send them); the body
cases carry a valid signature, so they are what a buggy or compromised provider
could send: the shop must still answer with a code and write nothing.
"""

import json
import time
from typing import Any

import pytest

from callbacks.models import ProviderNotification
from payments.models import Payment
from payments.services import payment_create
from tests.callbacks.test_api import body_for, notify
from tests.conftest import new_key

NOW = int(time.time())
HEX64 = "a" * 64
E_ACUTE_64 = "\u00e9" * 64
ARABIC_ZERO = "\u0660"


@pytest.fixture
def payment(create_order, user) -> Payment:
    number = create_order(key=new_key()).json()["number"]
    return payment_create(user_id=user.pk, order_number=number)


def assert_refused(response: Any, code: str, payment: Payment) -> None:
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == code
    assert ProviderNotification.objects.count() == 0
    assert Payment.objects.get(pk=payment.pk).status == "PENDING"


# --- The signature header (unauthenticated) -------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header",
    [
        pytest.param(f"t=\u00b2,v1={HEX64}", id="superscript-digit-t"),
        pytest.param(f"t={'9' * 400},v1={HEX64}", id="400-digit-t"),
        pytest.param(f"t={'9' * 5000},v1={HEX64}", id="5000-digit-t"),
        pytest.param(f"t={NOW},v1={E_ACUTE_64}", id="non-ascii-v1"),
        pytest.param(f"t={NOW},v1={ARABIC_ZERO}{'a' * 63}", id="arabic-indic-digit-v1"),
        pytest.param(f"t={NOW},v1={'A' * 64}", id="uppercase-hex-v1"),
        pytest.param(f"t={NOW},v1={'a' * 63}", id="short-v1"),
        pytest.param(f"t=-{NOW},v1={HEX64}", id="negative-t"),
        pytest.param(f"t={NOW},v1={HEX64},", id="trailing-comma"),
    ],
)
def test_a_garbled_signature_header_is_400_signature_invalid(payment, header):
    response = notify(body_for(payment), header=header)

    assert_refused(response, "signature-invalid", payment)


# --- Signed bodies that no column can hold -----------------------------------------------


def signed(raw: bytes) -> Any:
    return notify(None, raw=raw)


@pytest.mark.django_db
def test_a_30000_deep_signed_body_is_400(payment):
    response = signed(b"[" * 30_000 + b"]" * 30_000)

    assert_refused(response, "callback-malformed", payment)


@pytest.mark.django_db
@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-32-be"])
def test_a_utf16_or_utf32_signed_body_is_400(payment, encoding):
    response = signed(json.dumps(body_for(payment)).encode(encoding))

    assert_refused(response, "callback-malformed", payment)


@pytest.mark.django_db
@pytest.mark.parametrize("amount", [2**63, 2**63 - 1 + 10, -1, 10**4000])
def test_an_amount_beyond_bigint_is_400(payment, amount):
    # 10**4000 is spelled out in the body: under Python's int-string limit of 4300 digits.
    raw = json.dumps(body_for(payment, amount=0)).replace('"amount": 0', f'"amount": {amount}')
    response = signed(raw.encode())

    assert_refused(response, "callback-malformed", payment)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "override",
    [
        pytest.param({"notify_id": "N" * 65}, id="notify_id-65"),
        pytest.param({"trade_no": "T" * 65}, id="trade_no-65"),
        pytest.param({"out_trade_no": "P" * 65}, id="out_trade_no-65"),
        pytest.param({"currency": "CNYX"}, id="currency-4"),
        pytest.param({"currency": "cn"}, id="currency-not-iso"),
    ],
)
def test_an_id_or_currency_longer_than_its_column_is_400(payment, override):
    response = signed(json.dumps(body_for(payment, **override)).encode())

    assert_refused(response, "callback-malformed", payment)


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["notify_id", "trade_no", "out_trade_no", "currency"])
def test_a_nul_in_an_id_is_400(payment, field):
    body = body_for(payment)
    body[field] = body[field][:2] + "\u0000"
    response = signed(json.dumps(body).encode())

    assert_refused(response, "callback-malformed", payment)


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["trade_no", "notify_id"])
def test_a_lone_surrogate_in_an_id_is_400(payment, field):
    # json.dumps escapes it as \ud800: valid JSON syntax, but not Unicode text.
    response = signed(json.dumps(body_for(payment, **{field: "T\ud800"})).encode())

    assert_refused(response, "callback-malformed", payment)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "paid_at", ["2026-11-29T09:00:00", "9999-12-31T23:59:59-23:59", "2026-11-29T09:00:00\u0000"]
)
def test_a_paid_at_that_is_naive_or_out_of_range_is_400(payment, paid_at):
    response = signed(json.dumps(body_for(payment, paid_at=paid_at)).encode())

    assert_refused(response, "callback-malformed", payment)
