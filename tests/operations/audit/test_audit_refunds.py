"""The audit's refund, orphan and notification checks (invariants 2, 6 and 7 of
docs/design.md): clean on a shop with refunds, and each invariant broken in turn is reported."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from callbacks.models import ProviderNotification
from operations.audit.checks import refunds
from operations.audit.run import audit_run
from operations.statements.passes import pass_run_once
from orders.models import Order
from payments.models import LedgerEntry, Payment, Refund
from tests.conftest import new_key

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass(frozen=True)
class Shop:
    partly: Order  # PAID, 1000 refunded
    refunded: Order  # REFUNDED in two refunds


@pytest.fixture
def shop(pay, refund, create_order, order, due_at_once) -> Shop:
    assert pay().status_code == 200
    assert refund(body={"amount": 1000}).status_code == 200
    other = Order.objects.get(number=create_order(key=new_key()).json()["number"])
    assert pay(number=other.number).status_code == 200
    assert refund(number=other.number, body={"amount": 1}).status_code == 200
    assert refund(number=other.number).status_code == 200
    pass_run_once()  # ships the PAID order (no worker here)
    return Shop(partly=Order.objects.get(pk=order.pk), refunded=Order.objects.get(pk=other.pk))


def test_a_shop_with_refunds_audits_clean(shop):
    assert (shop.partly.status, shop.refunded.status) == ("PAID", "REFUNDED")

    report = audit_run()

    assert report.ok, report.findings


def _refunded_amount_off(s: Shop) -> dict[str, object]:
    Order.objects.filter(pk=s.partly.pk).update(refunded_amount=F("refunded_amount") + 1)
    return {"order": s.partly.pk}


def _refunded_in_part(s: Shop) -> dict[str, object]:
    LedgerEntry.objects.filter(order=s.refunded, kind="refund", amount=1).delete()
    Order.objects.filter(pk=s.refunded.pk).update(refunded_amount=F("amount") - 1)
    return {"order": s.refunded.pk}


def _refund_not_booked(s: Shop) -> dict[str, object]:
    entry = LedgerEntry.objects.get(order=s.partly, kind="refund")
    refund_id = entry.refund_attempt_id
    entry.delete()
    return {"refund": refund_id}


def _refund_unknown_for_long(s: Shop) -> dict[str, object]:
    refund = Refund.objects.create(
        order=s.partly,
        payment=s.partly.payments.get(),
        refund_no="R-LOST",
        amount=1,
        currency=s.partly.currency,
        status="UNKNOWN",
    )
    Refund.objects.filter(pk=refund.pk).update(updated_at=timezone.now() - timedelta(hours=1))
    return {"refund": refund.pk}


def _orphan_never_refunded(s: Shop) -> dict[str, object]:
    long_ago = timezone.now() - timedelta(hours=1)
    orphan = Payment.objects.create(
        order=s.partly,
        out_trade_no="P-ORPHAN",
        trade_no="T-ORPHAN",
        status="ORPHANED",
        amount=1,
        currency=s.partly.currency,
        payer=s.partly.user.username,
        settled_at=long_ago,
    )
    LedgerEntry.objects.create(
        kind="orphan_capture",
        order=s.partly,
        payment=orphan,
        trade_no="T-ORPHAN",
        amount=1,
        currency=s.partly.currency,
    )
    return {"payment": orphan.pk}


def _deferred_and_forgotten(s: Shop) -> dict[str, object]:
    row = ProviderNotification.objects.create(
        notify_id="N-FORGOTTEN",
        out_trade_no="P-WHATEVER",
        trade_status="SUCCESS",
        amount=1,
        currency="CNY",
        raw_payload="{}",
        outcome="deferred",
        response_status=200,
        response_body={"received": True},
    )
    ProviderNotification.objects.filter(pk=row.pk).update(
        received_at=timezone.now() - timedelta(hours=1)
    )
    return {"notification": row.pk}


BROKEN: dict[str, tuple[Callable[[Shop], dict[str, object]], str]] = {
    "refunded_amount off its refunds": (_refunded_amount_off, refunds.REFUNDS_WITHIN_CAPTURE),
    "REFUNDED with part of it refunded": (
        _refunded_in_part,
        refunds.REFUNDED_ORDER_REFUNDED_IN_FULL,
    ),
    "SUCCEEDED refund without its entry": (_refund_not_booked, refunds.SUCCEEDED_REFUND_BOOKED),
    "refund left UNKNOWN": (_refund_unknown_for_long, refunds.REFUND_SETTLED),
    "orphaned capture never refunded": (_orphan_never_refunded, refunds.ORPHAN_REFUNDED),
    "notification deferred and forgotten": (
        _deferred_and_forgotten,
        refunds.NOTIFICATION_RESOLVED,
    ),
}


def test_each_broken_refund_invariant_is_reported_with_its_ids(shop):
    for name, (plant, invariant) in BROKEN.items():
        with transaction.atomic():
            expected = plant(shop)
            found = [f.ids for f in audit_run().findings if f.invariant == invariant]
            assert any(expected.items() <= ids.items() for ids in found), (name, found)
            transaction.set_rollback(True)
    assert audit_run().ok
