"""One test per recovery point of the pay flow, and a crash after each phase.

A record planted at each point (as a crashed request would leave it) resumes
correctly; a crash injected after each phase, by exception or by killing the
process, is followed by a retry with the same key that ends with one debit.
"""

import pytest
from django.db import connection

from idempotency.models import IdempotencyKey
from orders.models import InventoryMovement, Order, Product
from payments.flows import PayPoint
from payments.models import LedgerEntry, Payment
from payments.providers import get_provider
from payments.services import payment_create, provider_idempotency_key
from tests.assertions import assert_paid_once
from tests.conftest import new_key
from tests.factories import pay_record_plant
from tests.injection import crash_on
from tests.processes import post_and_die

pytestmark = pytest.mark.django_db(transaction=True)


def plant(user, order, *, point: str, payment: Payment | None = None) -> str:
    return pay_record_plant(user, order, point=point, payment=payment)


def test_resumes_from_started(pay, order, user, wallet):
    key = plant(user, order, point=PayPoint.STARTED)

    assert pay(key).status_code == 200
    assert_paid_once(order, user, wallet)


def test_resumes_from_payment_created_with_a_pending_attempt(pay, order, user, wallet):
    payment = payment_create(user_id=user.pk, order_number=order.number)
    key = plant(user, order, point=PayPoint.PAYMENT_CREATED, payment=payment)

    assert pay(key).status_code == 200
    assert Payment.objects.count() == 1
    assert_paid_once(order, user, wallet)


def test_resumes_from_payment_created_when_the_provider_already_charged(
    pay, order, user, wallet, settings
):
    # Given an attempt the provider charged but whose answer we never got
    payment = payment_create(user_id=user.pk, order_number=order.number)
    Payment.objects.filter(pk=payment.pk).update(status="UNKNOWN")
    get_provider().charge(
        out_trade_no=payment.out_trade_no,
        amount=payment.amount,
        currency=payment.currency,
        payer=payment.payer,
        notify_url=f"{settings.SHOP_BASE_URL}/nowhere/",
        idempotency_key=provider_idempotency_key(payment),
    )
    key = plant(user, order, point=PayPoint.PAYMENT_CREATED, payment=payment)

    # When the client retries: the flow asks before charging
    assert pay(key).status_code == 200

    # Then the first charge is the only one
    assert_paid_once(order, user, wallet)


def test_finished_replays(pay, order, user, wallet):
    key = new_key()
    first = pay(key)

    replay = pay(key)

    assert replay.json() == first.json()
    assert replay["Idempotent-Replayed"] == "true"
    assert_paid_once(order, user, wallet)


# --- Crashes by exception ------------------------------------------------------------


def test_exception_after_phase_one_then_same_key_pays_once(pay, order, user, wallet):
    key = new_key()
    # The first statement after phase one committed: reading the attempt back
    # before calling the provider.
    with connection.execute_wrapper(crash_on('SELECT "payments_payment"')):
        crashed = pay(key)

    assert crashed.status_code == 500
    assert IdempotencyKey.objects.get(key=key).recovery_point == PayPoint.PAYMENT_CREATED
    assert pay(key).status_code == 200
    assert_paid_once(order, user, wallet)


def test_exception_after_the_provider_charged_then_same_key_pays_once(pay, order, user, wallet):
    key = new_key()
    # Phase two's first write: the provider has charged, nothing of it is recorded.
    with connection.execute_wrapper(crash_on('UPDATE "payments_payment"')):
        crashed = pay(key)

    assert crashed.status_code == 500
    assert Payment.objects.get().status == "PENDING"
    assert wallet(user)["charged_total"] == order.amount  # charged once, already
    assert pay(key).status_code == 200  # same derived provider key: a replay there
    assert_paid_once(order, user, wallet)


# --- Crashes by killing the process ------------------------------------------------


def kill_during_pay(*, user, order, key: str, after_sql: str, settings):
    """Pay in a child process that dies (exit 137) right after ``after_sql`` runs."""
    path = f"/api/v1/orders/{order.number}/pay/"
    return post_and_die(user=user, path=path, key=key, after_sql=after_sql, settings=settings)


@pytest.mark.parametrize(
    ("after_sql", "charged"),
    [
        # phase one committed, provider not called yet
        ('SELECT "payments_payment"', 0),
        # provider charged, phase two half-written and never committed
        ('UPDATE "payments_payment"', 1),
    ],
)
def test_killed_process_then_same_key_pays_once(
    pay, order, user, wallet, settings, after_sql, charged
):
    key = new_key()

    child = kill_during_pay(user=user, order=order, key=key, after_sql=after_sql, settings=settings)

    assert child.returncode == 137, child.stderr
    record = IdempotencyKey.objects.get(key=key)
    assert record.recovery_point == PayPoint.PAYMENT_CREATED
    assert Payment.objects.get().status == "PENDING"
    assert wallet(user)["charged_total"] == charged * order.amount
    # The dead request still holds the lock: the retry waits for it to go stale.
    assert pay(key).status_code == 409
    settings.IDEMPOTENCY_LOCK_TIMEOUT = 0
    assert pay(key).status_code == 200
    assert_paid_once(order, user, wallet)


# --- docs/design.md, "What the tests answer" --------------------------------------


def test_q3_first_request_crashed_half_way_state_is_consistent_after_retry(
    pay, order, user, wallet, product
):
    # Given the first pay died after the provider charged, before we recorded it
    key = new_key()
    with connection.execute_wrapper(crash_on('UPDATE "payments_payment"')):
        assert pay(key).status_code == 500

    # When the client retries with the same key
    retried = pay(key)

    # Then orders, payments, ledger, inventory, records and the wallet all agree
    assert retried.status_code == 200
    assert_paid_once(order, user, wallet)
    assert Product.objects.get(pk=product.pk).stock == product.stock - 2
    assert InventoryMovement.objects.filter(order=order, kind="RESERVE").count() == 1
    record = IdempotencyKey.objects.get(key=key)
    assert (record.recovery_point, record.response_status) == ("finished", 200)
    assert record.resource_id == Payment.objects.get(status="SUCCEEDED").pk


def test_half_way_failure_state_updated_ledger_row_not_written_recovers(pay, order, user, wallet):
    # The payment's UPDATE to SUCCEEDED ran; the ledger INSERT fails in the same
    # transaction, so the state update rolls back with it.
    key = new_key()
    with connection.execute_wrapper(crash_on('INSERT INTO "payments_ledgerentry"')):
        assert pay(key).status_code == 500

    assert Payment.objects.get().status == "PENDING"
    assert LedgerEntry.objects.count() == 0
    assert Order.objects.get(pk=order.pk).status == "UNPAID"
    assert pay(key).status_code == 200
    assert_paid_once(order, user, wallet)
