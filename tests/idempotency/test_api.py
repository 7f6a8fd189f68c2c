"""GET /api/v1/idempotency-keys/{key}/: what became of my key."""

from datetime import timedelta

import pytest
from django.utils import timezone

from idempotency.models import IdempotencyKey
from tests.conftest import client_for, new_key

pytestmark = pytest.mark.django_db


def test_finished_key_reports_its_answer_and_expiry(client, create_order, settings):
    key = new_key()
    create_order(key=key)
    record = IdempotencyKey.objects.get(key=key)

    body = client.get(f"/api/v1/idempotency-keys/{key}/").json()

    assert body["status"] == "finished"
    assert body["recovery_point"] == "finished"
    assert body["response_status"] == 201
    assert record.finished_at is not None
    expected = record.finished_at + timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)
    assert body["expires_at"] == expected.isoformat().replace("+00:00", "Z")


def test_unfinished_key_is_in_progress_and_never_expires(client, user):
    IdempotencyKey.objects.create(
        user=user,
        key="mid-way",
        fingerprint="x",
        method="POST",
        path="/",
        recovery_point="payment_created",
        created_at=timezone.now(),
    )

    body = client.get("/api/v1/idempotency-keys/mid-way/").json()

    assert body["status"] == "in_progress"
    assert body["recovery_point"] == "payment_created"
    assert body["response_status"] is None
    assert body["expires_at"] is None


def test_another_users_key_is_404(create_order, other_user):
    key = new_key()
    create_order(key=key)

    response = client_for(other_user).get(f"/api/v1/idempotency-keys/{key}/")

    assert response.status_code == 404
    assert response.json()["code"] == "not-found"
