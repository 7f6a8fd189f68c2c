"""Double clicks on Pay, for real: threads with their own connections, the sandbox over HTTP."""

from collections import Counter

import pytest

from fastpaths.unkeyed import LAYER_OFF
from payments.models import LedgerEntry, Payment
from tests.assertions import assert_paid_once
from tests.concurrency.helpers import run_at_once
from tests.conftest import client_for, new_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def pay_from_thread(user, order, key: str) -> int:
    response = client_for(user).post(
        f"/api/v1/orders/{order.number}/pay/", {}, format="json", headers={"Idempotency-Key": key}
    )
    return response.status_code


def test_30_identical_pays_at_once_debit_once(order, user, wallet, sandbox):
    key = new_key()

    statuses = Counter(run_at_once(30, lambda _i: pay_from_thread(user, order, key)))

    assert set(statuses) <= {200, 409}, statuses
    assert statuses[200] >= 1
    assert Payment.objects.count() == 1
    assert_paid_once(order, user, wallet)


def test_10_pays_with_different_keys_at_once_debit_once(order, user, wallet, sandbox):
    statuses = Counter(run_at_once(10, lambda _i: pay_from_thread(user, order, new_key())))

    assert statuses == {200: 1, 409: 9}, statuses
    assert Payment.objects.count() == 1
    assert_paid_once(order, user, wallet)


@pytest.fixture
def layer_off(settings):
    for name, value in LAYER_OFF.items():  # IDEMPOTENCY_ENABLED=false
        setattr(settings, name, value)


def test_without_the_key_layer_repeated_pays_still_debit_once(
    layer_off, order, user, wallet, sandbox
):
    key = new_key()

    statuses = [pay_from_thread(user, order, key) for _ in range(3)]

    # No replay any more (nothing stored): the state machine and the one-live-
    # attempt index turn the repeats into 409 order-not-payable instead.
    assert statuses == [200, 409, 409]
    assert_paid_once(order, user, wallet)


def test_without_the_key_layer_concurrent_pays_still_debit_once(
    layer_off, order, user, wallet, sandbox
):
    key = new_key()

    statuses = Counter(run_at_once(10, lambda _i: pay_from_thread(user, order, key)))

    assert statuses == {200: 1, 409: 9}, statuses
    assert LedgerEntry.objects.count() == 1
    assert_paid_once(order, user, wallet)
