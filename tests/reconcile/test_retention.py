"""Retention, end to end with the periodic reaper (its Celery task function, no broker)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from idempotency.models import IdempotencyKey
from idempotency.tasks import reap_idempotency_keys
from orders.models import Order
from payments.flows import PayPoint
from payments.models import Payment
from tests.conftest import new_key

pytestmark = pytest.mark.django_db(transaction=True)


def let_time_pass(seconds: float) -> None:
    """Every record finished (and started) ``seconds`` earlier, as if that long had passed."""
    IdempotencyKey.objects.update(
        created_at=F("created_at") - timedelta(seconds=seconds),
        finished_at=F("finished_at") - timedelta(seconds=seconds),
    )


def test_q5_records_expire_through_the_periodic_reaper_and_a_late_duplicate_is_not_redone(
    create_order, pay, user, wallet, settings
):
    # Given an order created with one key and paid with another
    create_key, pay_key = new_key(), new_key()
    created = create_order(key=create_key)
    number = created.json()["number"]
    paid = pay(pay_key, number=number)
    assert (created.status_code, paid.status_code) == (201, 200)
    ttl = settings.IDEMPOTENCY_KEY_TTL
    for record in IdempotencyKey.objects.filter(key__in=[create_key, pay_key]):
        # How long are records kept? IDEMPOTENCY_KEY_TTL after they finished.
        assert record.finished_at is not None
        assert record.expires_at == record.finished_at + timedelta(seconds=ttl)
    # The reaper is beat's periodic job
    assert settings.CELERY_BEAT_SCHEDULE["reap-idempotency-keys"]["task"] == (
        "idempotency.tasks.reap_idempotency_keys"
    )
    # ... and an unfinished record (a request whose outcome is not settled) is never reaped
    stuck = IdempotencyKey.objects.create(
        user=user,
        key=new_key(),
        fingerprint="-",
        method="POST",
        path=f"/api/v1/orders/{number}/pay/",
        recovery_point=PayPoint.PAYMENT_CREATED,
        created_at=timezone.now(),
    )

    # Within the window: the periodic reaper keeps them, and duplicates replay
    assert reap_idempotency_keys() == 0
    assert create_order(key=create_key)["Idempotent-Replayed"] == "true"
    assert pay(pay_key, number=number)["Idempotent-Replayed"] == "true"

    # When the window has passed, the periodic reaper deletes the finished ones
    let_time_pass(ttl + 1)
    finished = IdempotencyKey.objects.filter(recovery_point="finished").count()
    assert reap_idempotency_keys() == finished
    assert not IdempotencyKey.objects.filter(key__in=[create_key, pay_key]).exists()
    assert IdempotencyKey.objects.filter(pk=stuck.pk).exists()

    # Then a late duplicate is a new request, and nothing is done twice: the
    # constraints below the key layer answer (a stored 409), not a second order
    # or a second charge.
    late_create = create_order(key=create_key)
    late_pay = pay(pay_key, number=number)
    assert late_create.status_code == 409
    assert late_create.json()["code"] == "idempotency-key-reused"
    assert late_pay.status_code == 409
    assert late_pay.json()["code"] == "order-not-payable"
    assert [r["Idempotent-Replayed"] for r in (late_create, late_pay)] == ["false", "false"]
    assert Order.objects.filter(user=user, idempotency_key=create_key).count() == 1
    assert Payment.objects.filter(order__number=number).count() == 1
    assert wallet(user)["charged_total"] == Order.objects.get(number=number).amount
    # The late answers are stored again, for the new window
    assert IdempotencyKey.objects.filter(key__in=[create_key, pay_key]).count() == 2


def test_the_reaper_task_deletes_in_batches_and_keeps_fresh_records(create_order, settings):
    for _ in range(3):
        assert create_order(key=new_key()).status_code == 201
    let_time_pass(settings.IDEMPOTENCY_KEY_TTL + 1)
    assert create_order(key=new_key()).status_code == 201  # a fresh one

    assert reap_idempotency_keys() == 3
    assert IdempotencyKey.objects.count() == 1
