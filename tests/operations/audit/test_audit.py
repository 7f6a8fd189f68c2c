"""The audit: clean on a consistent shop (exit 0); every invariant broken in turn is
reported with the ids of the rows involved (exit 1).

Inconsistencies are planted with direct writes (``QuerySet.update``, raw rows),
as a bug, a manual fix or a misbehaving provider would leave them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from demo import wallet_audit as wallets
from demo.sandbox.models import Charge, Wallet
from edge.money import money
from idempotency.models import IdempotencyKey
from operations.audit.checks import captures, inventory, records
from operations.audit.run import AuditReport, Finding, SummaryRow, audit_run
from orders.models import Order, Product, Shipment
from orders.services import LineRequest, order_create
from payments.models import LedgerEntry, Payment
from payments.services import payment_create, payment_mark_unknown
from tests.conftest import new_key
from tests.factories import UserFactory


@dataclass(frozen=True)
class World:
    """A consistent shop: paid, cancelled, declined and fenced orders, and one unpaid."""

    paid: Order
    cancelled: Order
    declined: Order
    fenced: Order
    unpaid: Order


@pytest.fixture
def world(pay, order, user, client, create_order, fault, due_at_once) -> World:
    assert pay().status_code == 200

    def new_order() -> Order:
        return Order.objects.get(number=create_order(key=new_key()).json()["number"])

    cancelled = new_order()
    cancel = client.post(
        f"/api/v1/orders/{cancelled.number}/cancel/",
        format="json",
        headers={"Idempotency-Key": new_key()},
    )
    assert cancel.status_code == 200
    declined, fenced, unpaid = new_order(), new_order(), new_order()
    fault("decline")
    assert pay(number=declined.number).status_code == 402
    fault("error_before_commit")
    assert pay(number=fenced.number).status_code == 503
    # The reconciler fences and fails the unknown attempt, and ships the paid order.
    call_command("reconcile", "--once", stdout=StringIO())
    return World(order, cancelled, declined, fenced, unpaid)


def audit_command() -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("audit", stdout=out)
    except SystemExit as exit_:
        return int(exit_.code or 0), out.getvalue()
    return 0, out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_a_consistent_shop_audits_clean(world):
    report = audit_run()

    assert report.ok, report.findings
    assert all(row.problems == 0 for row in report.summary)
    checked = {row.check: row.checked for row in report.summary}
    assert checked["orders: PAID = one SUCCEEDED payment + one capture"] == 1
    assert checked["provider: charges and net debits match the ledger"] == 1  # one payer
    assert Payment.objects.get(order=world.fenced).failure_code == "closed"
    code, out = audit_command()
    assert code == 0
    assert out.splitlines()[-1] == "audit: clean"


def test_the_interface_the_storefront_codes_against():
    finding = Finding(invariant="x", message="y", ids={"order": 1})
    report = AuditReport(findings=[finding], summary=[SummaryRow(check="c", checked=1, problems=1)])

    assert not report.ok
    assert AuditReport(findings=[], summary=[]).ok
    with pytest.raises(AttributeError):
        finding.invariant = "z"  # type: ignore[misc]


# --- Each invariant broken in turn -------------------------------------------------------------


def _unknown_for_long(w: World) -> dict[str, object]:
    payment = payment_create(user_id=w.unpaid.user_id, order_number=w.unpaid.number)
    payment_mark_unknown(payment_id=payment.pk)
    Payment.objects.filter(pk=payment.pk).update(updated_at=timezone.now() - timedelta(hours=1))
    return {"payment": payment.pk}


def _stuck_record(w: World) -> dict[str, object]:
    record = IdempotencyKey.objects.create(
        user_id=w.unpaid.user_id,
        key=new_key(),
        fingerprint="-",
        method="POST",
        path=f"/api/v1/orders/{w.unpaid.number}/pay/",
        recovery_point="started",
        created_at=timezone.now() - timedelta(hours=1),
        lock_token=uuid.uuid4(),
        locked_at=timezone.now() - timedelta(hours=1),
    )
    return {"record": record.pk}


def _record_of_missing_order(w: World) -> dict[str, object]:
    record = IdempotencyKey.objects.get(resource_type="order", resource_id=w.unpaid.pk)
    IdempotencyKey.objects.filter(pk=record.pk).update(resource_id=10**12)
    return {"record": record.pk, "resource_id": 10**12}


def _record_of_another_users_payment(w: World) -> dict[str, object]:
    record = IdempotencyKey.objects.get(resource_type="payment", response_status=200)
    IdempotencyKey.objects.filter(pk=record.pk).update(user=UserFactory.create())
    return {"record": record.pk}


def _second_record_for_one_payment(w: World) -> dict[str, object]:
    record = IdempotencyKey.objects.get(resource_type="payment", response_status=200)
    twin = IdempotencyKey.objects.get(pk=record.pk)
    twin.pk, twin.key = None, new_key()
    twin.save(force_insert=True)
    return {"payment": record.resource_id, "records": sorted([record.pk, twin.pk])}


def _stray_provider_charge(w: World) -> dict[str, object]:
    # A provider that charges a fenced attempt anyway: turn its CLOSED fence into a
    # SUCCESS and move the money, in the provider's own tables.
    payment = Payment.objects.get(order=w.fenced)
    wallet, _ = Wallet.objects.get_or_create(
        payer=payment.payer, defaults={"balance": django_settings.SANDBOX_WALLET_START}
    )
    Wallet.objects.filter(pk=wallet.pk).update(
        balance=F("balance") - payment.amount, charged_total=F("charged_total") + payment.amount
    )
    Charge.objects.filter(out_trade_no=payment.out_trade_no).update(
        status="SUCCESS",
        wallet=wallet,
        amount=payment.amount,
        currency=payment.currency,
        notify_url="http://127.0.0.1:9/",
        paid_at=timezone.now(),
    )
    return {"out_trade_no": payment.out_trade_no, "payment": payment.pk, "order": w.fenced.pk}


def _succeeded_payment_unknown_to_provider(w: World) -> dict[str, object]:
    payment = Payment.objects.get(order=w.paid, status="SUCCEEDED")
    Payment.objects.filter(pk=payment.pk).update(trade_no="T-NEVER-CHARGED")
    LedgerEntry.objects.filter(payment=payment).update(trade_no="T-NEVER-CHARGED")
    return {"payment": payment.pk, "order": w.paid.pk}


def _wallet_total_off(w: World) -> dict[str, object]:
    Wallet.objects.update(charged_total=F("charged_total") + 1)
    return {"payer": w.paid.user.username}


def _paid_without_payment(w: World) -> dict[str, object]:
    Payment.objects.filter(order=w.paid).update(status="FAILED")
    return {"order": w.paid.pk}


def _capture_of_another_amount(w: World) -> dict[str, object]:
    LedgerEntry.objects.update(amount=F("amount") + 1)
    return {"order": w.paid.pk}


def _capture_of_unpaid_order(w: World) -> dict[str, object]:
    Order.objects.filter(pk=w.paid.pk).update(status="CANCELLED")
    return {"order": w.paid.pk}


def _capture_of_another_trade(w: World) -> dict[str, object]:
    LedgerEntry.objects.update(trade_no="T-OTHER")
    return {"order": w.paid.pk}


def _uncaptured_payment(w: World) -> dict[str, object]:
    LedgerEntry.objects.all().delete()
    return {"payment": Payment.objects.get(order=w.paid, status="SUCCEEDED").pk}


def _unshipped(w: World) -> dict[str, object]:
    Shipment.objects.all().delete()
    return {"order": w.paid.pk}


def _shipped_unpaid(w: World) -> dict[str, object]:
    return {"shipment": Shipment.objects.create(order=w.unpaid).pk, "order": w.unpaid.pk}


def _stock_off_movements(w: World) -> dict[str, object]:
    Product.objects.update(stock=F("stock") + 1)
    return {"product": w.paid.lines.get().product_id}


def _cancelled_without_release(w: World) -> dict[str, object]:
    Order.objects.filter(pk=w.unpaid.pk).update(status="CANCELLED")
    return {"product": w.unpaid.lines.get().product_id, "order": w.unpaid.pk}


# Each: how to break the shop (returning the ids a finding must name), and the
# invariant that must say so.
BROKEN: dict[str, tuple[Callable[[World], dict[str, object]], str]] = {
    "PAID order without its SUCCEEDED payment": (
        _paid_without_payment,
        captures.PAID_ORDER_ONE_PAYMENT,
    ),
    "capture of another amount": (_capture_of_another_amount, captures.PAID_ORDER_ONE_CAPTURE),
    "capture for an order that is not PAID": (_capture_of_unpaid_order, captures.CAPTURE_ONLY_PAID),
    "capture of another trade": (_capture_of_another_trade, captures.CAPTURE_MATCHES_PAYMENT),
    "SUCCEEDED payment never captured": (_uncaptured_payment, captures.SUCCEEDED_CAPTURED),
    "payment left UNKNOWN": (_unknown_for_long, captures.PAYMENT_SETTLED),
    "PAID order never shipped": (_unshipped, captures.PAID_ORDER_SHIPPED),
    "shipment of an unpaid order": (_shipped_unpaid, captures.SHIPMENT_ONLY_PAID),
    "stock off its movements": (_stock_off_movements, inventory.STOCK_EQUALS_MOVEMENTS),
    "order cancelled without its release (per product)": (
        lambda w: {"product": _cancelled_without_release(w)["product"]},
        inventory.STOCK_EQUALS_RECEIVED_MINUS_HELD,
    ),
    "order cancelled without its release (per order)": (
        lambda w: {"order": _cancelled_without_release(w)["order"]},
        inventory.ORDER_MOVEMENTS_MATCH_LINES,
    ),
    "finished record of a missing order": (
        _record_of_missing_order,
        records.RECORD_POINTS_AT_OBJECT,
    ),
    "finished record of someone else's payment": (
        _record_of_another_users_payment,
        records.RECORD_POINTS_AT_OBJECT,
    ),
    "one payment, two keys": (_second_record_for_one_payment, records.PAYMENT_MADE_BY_ONE_KEY),
    "record stuck in progress": (_stuck_record, records.RECORD_NOT_STUCK),
    "provider holds no charge for a SUCCEEDED payment": (
        _succeeded_payment_unknown_to_provider,
        wallets.PAYMENT_HAS_CHARGE,
    ),
}

# Broken in the provider's own tables: read by the provider's server over its own
# connection, so these must be committed (one shop each) to be seen.
PROVIDER_BROKEN: dict[str, tuple[Callable[[World], dict[str, object]], str]] = {
    "provider charged a fenced attempt": (_stray_provider_charge, wallets.CHARGE_HAS_PAID_ORDER),
    "wallet total off the PAID orders": (_wallet_total_off, wallets.WALLET_MATCHES_ORDERS),
}


def findings_of(report: AuditReport, invariant: str) -> list[dict[str, Any]]:
    return [f.ids for f in report.findings if f.invariant == invariant]


def audit_broken(world: World, plant: Callable[[World], dict[str, object]], invariant: str) -> None:
    expected_ids = plant(world)

    report = audit_run()
    code, out = audit_command()

    found = findings_of(report, invariant)
    assert any(expected_ids.items() <= ids.items() for ids in found), (found, report.findings)
    assert code == 1
    assert f"FINDING {invariant}:" in out
    assert out.splitlines()[-1] == f"audit: {len(report.findings)} problem(s)"


@pytest.mark.django_db(transaction=True)
def test_each_broken_invariant_is_reported_with_its_ids(world):
    # One shop, broken one way at a time: each plant is undone with its savepoint
    # (the audit reads our tables on this connection, so it sees the plant).
    for name, (plant, invariant) in BROKEN.items():
        try:
            with transaction.atomic():
                audit_broken(world, plant, invariant)
                transaction.set_rollback(True)
        except AssertionError as failure:
            raise AssertionError(f"{name}: {failure}") from failure
    assert audit_run().ok


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("plant", "invariant"), PROVIDER_BROKEN.values(), ids=PROVIDER_BROKEN.keys()
)
def test_a_misbehaving_provider_is_reported_with_its_ids(world, plant, invariant):
    audit_broken(world, plant, invariant)


@pytest.mark.django_db(transaction=True)
def test_a_provider_the_audit_cannot_read_is_a_finding(world, settings, gone_provider):
    settings.PROVIDER_BASE_URL = gone_provider

    report = audit_run()

    assert findings_of(report, wallets.PROVIDER_READABLE) == [{"payer": world.paid.user.username}]
    assert not report.ok


@pytest.mark.django_db
def test_one_key_that_made_two_orders_is_reported(user, product):
    # Only possible without orders' unique (user, key) index, as a fork might drop
    # it: drop it inside this test's transaction (rolled back afterwards).
    with connection.cursor() as cursor:
        cursor.execute('ALTER TABLE orders_order DROP CONSTRAINT "order_one_per_user_key"')
    key = new_key()
    made = [
        order_create(user_id=user.pk, lines=[LineRequest(product.sku, 1)], idempotency_key=key)
        for _ in range(2)
    ]

    report = audit_run()

    assert findings_of(report, records.KEY_MADE_ONE_ORDER) == [
        {"user": user.pk, "orders": sorted(order.pk for order in made)}
    ]


@pytest.mark.django_db(transaction=True)
def test_unsettled_and_unfinished_work_in_flight_is_not_a_finding(pay, fault, order, user):
    # Within RECONCILE_AFTER_S and the lock timeout a request may still be at it.
    fault("error_before_commit")
    assert pay().status_code == 503

    report = audit_run()

    assert not findings_of(report, captures.PAYMENT_SETTLED)
    assert not findings_of(report, records.RECORD_NOT_STUCK)
    assert report.ok, report.findings


def _ledger_lost_its_capture(w: World) -> dict[str, object]:
    LedgerEntry.objects.filter(order=w.paid).delete()
    return {"payer": w.paid.user.username}


# Each plant's findings speak of amounts: of the order, and of what is off.
AMOUNTS_TOLD: dict[str, Callable[[World], dict[str, object]]] = {
    "capture of another amount": _capture_of_another_amount,
    "ledger lost its capture": _ledger_lost_its_capture,
    "wallet total off the PAID orders": _wallet_total_off,
}
# An amount and its currency, as a finding writes it.
AMOUNT = re.compile(r"(-?\d[\d.,]*) ([A-Z]{3})\b")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("plant", AMOUNTS_TOLD.values(), ids=AMOUNTS_TOLD.keys())
def test_findings_tell_amounts_in_major_units_with_their_currency(world, plant):
    plant(world)
    minor = world.paid.amount

    messages = [finding.message for finding in audit_run().findings]

    amounts = [amount for message in messages for amount in AMOUNT.findall(message)]
    assert amounts, messages
    assert money(minor, world.paid.currency) in " ".join(messages)
    # Every amount as money: CNY with its two decimals; never the bare minor units.
    assert [
        (value, code) for value, code in amounts if not re.fullmatch(r"-?\d+\.\d\d", value)
    ] == []
    assert [m for m in messages if re.search(rf"(?<![\d.]){minor}(?![\d.])", m)] == []
