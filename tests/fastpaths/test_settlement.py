"""The batch settlement (a fast path) agrees with ``payment_settle`` (its reference).

The same plain answers (a success for the attempt's amount, a decline, a close)
are given to two identical sets of unknown attempts: one settled one by one with
``payments.services.payment_settle``, the other in one batch with
``fastpaths.settlement.payment_settle_many``. The rows each writes (attempts, ledger,
orders) must be the same, field by field.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from fastpaths.settlement import payment_settle_many
from orders.models import Order
from orders.services import LineRequest, order_create
from payments.models import LedgerEntry, Payment
from payments.providers import ChargeResult, ChargeStatus
from payments.services import payment_create, payment_mark_unknown, payment_settle
from tests.conftest import new_key
from tests.factories import ProductFactory

pytestmark = pytest.mark.django_db

# (provider status, decline reason): each case once per set.
CASES = [
    (ChargeStatus.SUCCESS, None),
    (ChargeStatus.SUCCESS, None),
    (ChargeStatus.DECLINED, "insufficient_funds"),
    (ChargeStatus.DECLINED, None),
    (ChargeStatus.CLOSED, None),
]


def _unknown_attempts(user: Any, settings: Any) -> list[Payment]:
    settings.MAX_OPEN_ORDERS_PER_USER = 1000
    product = ProductFactory.create(stock=100, price=1999)
    attempts = []
    for _ in CASES:
        order = order_create(
            user_id=user.pk,
            lines=[LineRequest(sku=product.sku, quantity=1)],
            idempotency_key=new_key(),
        )
        payment = payment_create(user_id=user.pk, order_number=order.number)
        payment_mark_unknown(payment_id=payment.pk)
        attempts.append(Payment.objects.get(pk=payment.pk))
    return attempts


def _answers(attempts: list[Payment], tag: str) -> list[tuple[Payment, ChargeResult]]:
    paid_at = timezone.now()
    return [
        (
            payment,
            ChargeResult(
                out_trade_no=payment.out_trade_no,
                status=status,
                trade_no=f"T-{tag}-{index}" if status is ChargeStatus.SUCCESS else None,
                amount=payment.amount,
                currency=payment.currency,
                paid_at=paid_at if status is ChargeStatus.SUCCESS else None,
                decline_reason=reason,
            ),
        )
        for index, (payment, (status, reason)) in enumerate(zip(attempts, CASES, strict=True))
    ]


def _rows(attempts: list[Payment], tag: str) -> list[tuple[Any, ...]]:
    """What was written about each attempt, without ids, times or the run's tag."""
    rows = []
    for payment in attempts:
        fresh = Payment.objects.get(pk=payment.pk)
        ledger = [
            (entry.kind, entry.amount, entry.currency, entry.trade_no.replace(tag, "*"))
            for entry in LedgerEntry.objects.filter(payment=fresh)
        ]
        order = Order.objects.get(pk=fresh.order_id)
        rows.append(
            (
                fresh.status,
                fresh.failure_code,
                (fresh.trade_no or "").replace(tag, "*"),
                fresh.settled_at is not None,
                ledger,
                order.status,
                order.paid_at is not None,
            )
        )
    return rows


def test_the_batch_writes_what_payment_settle_writes_one_by_one(user, settings):
    # Given two identical sets of unknown attempts and the same answers for each
    one_by_one, batched = _unknown_attempts(user, settings), _unknown_attempts(user, settings)

    # When the reference settles one set and the fast path the other
    for payment, result in _answers(one_by_one, "ref"):
        payment_settle(payment_id=payment.pk, result=result)
    settled = payment_settle_many(answers=_answers(batched, "fast"))

    # Then every attempt was settled by the batch, and the rows are the same
    assert set(settled) == {payment.pk for payment in batched}
    assert _rows(batched, "fast") == _rows(one_by_one, "ref")
    # ... and the attempts the batch returns say what the database says
    for payment in settled.values():
        fresh = Payment.objects.get(pk=payment.pk)
        assert (payment.status, payment.failure_code, payment.trade_no) == (
            fresh.status,
            fresh.failure_code,
            fresh.trade_no,
        )
