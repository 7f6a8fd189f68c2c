"""docs/design.md, "What the tests answer": the self-check questions, answered for order creation.

Question 3 (a crash half-way) is answered with the payment flow, where there is
a half-way; for the single-phase order creation see tests/faults/.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from idempotency.drf import IDEMPOTENCY_KEY_PARAMETER
from idempotency.models import IdempotencyKey
from idempotency.services import idempotency_key_reap
from orders.models import InventoryMovement, Order, OrderLine, Product
from tests.concurrency.helpers import run_at_once
from tests.conftest import client_for, new_key
from tests.factories import ProductFactory


def table_sizes() -> dict[str, int]:
    return {
        "orders": Order.objects.count(),
        "lines": OrderLine.objects.count(),
        "movements": InventoryMovement.objects.count(),
        "keys": IdempotencyKey.objects.count(),
    }


@pytest.mark.django_db
def test_q1_same_request_sent_3_times_adds_no_extra_rows(create_order):
    key = new_key()
    create_order(key=key)
    after_first = table_sizes()

    answers = [create_order(key=key) for _ in range(2)]

    assert table_sizes() == after_first
    assert [a["Idempotent-Replayed"] for a in answers] == ["true", "true"]


@pytest.mark.django_db(transaction=True)
def test_q2_100_identical_requests_at_once_only_one_succeeds(user):
    product = ProductFactory.create(stock=100)
    key = new_key()

    def send(_index: int) -> str:
        response = client_for(user).post(
            "/api/v1/orders/",
            {"lines": [{"sku": product.sku, "quantity": 1}]},
            format="json",
            headers={"Idempotency-Key": key},
        )
        assert response.status_code in (201, 409)
        return response["Idempotent-Replayed"] if response.status_code == 201 else "busy"

    answers = run_at_once(100, send)

    assert answers.count("false") == 1
    assert Order.objects.count() == 1
    assert Product.objects.get(pk=product.pk).stock == 99


@pytest.mark.django_db
def test_q4_the_client_generates_the_key_and_the_server_requires_it(create_order):
    # The API never invents a key: without one, nothing happens.
    refused = create_order(key=None)

    assert refused.status_code == 400
    assert refused.json()["code"] == "idempotency-key-missing"
    assert Order.objects.count() == 0
    # The contract tells clients to make a high-entropy one (a UUID v4).
    assert "UUID" in str(IDEMPOTENCY_KEY_PARAMETER.description)


@pytest.mark.django_db
def test_q5_records_are_kept_for_the_window_then_a_duplicate_is_refused_not_redone(
    create_order, settings
):
    # Given an order created with a key
    key = new_key()
    first = create_order(key=key)
    record = IdempotencyKey.objects.get(key=key)
    assert record.finished_at is not None
    assert record.expires_at == record.finished_at + timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)

    # Within the window: the reaper keeps it and a duplicate replays
    assert idempotency_key_reap().deleted == 0
    assert create_order(key=key)["Idempotent-Replayed"] == "true"

    # After the window: the reaper deletes it
    later = timezone.now() + timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL + 1)
    assert idempotency_key_reap(now=later).deleted == 1
    assert not IdempotencyKey.objects.filter(key=key).exists()

    # A duplicate after expiry is a new request, and the unique (user, key) index
    # on orders still refuses to create a second order: a stored 409, not a replay.
    late = create_order(key=key)
    assert late.status_code == 409
    assert late.json()["code"] == "idempotency-key-reused"
    assert late.json()["order"] == first.json()["number"]
    assert Order.objects.count() == 1
