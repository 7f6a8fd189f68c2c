"""The reaper: finished records leave after the window, unfinished ones never."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from idempotency.models import IdempotencyKey, RecoveryPoint
from idempotency.services import idempotency_key_reap

pytestmark = pytest.mark.django_db


def make_records(user, *, finished: int, unfinished: int, age_s: int) -> None:
    at = timezone.now() - timedelta(seconds=age_s)
    IdempotencyKey.objects.bulk_create(
        [
            IdempotencyKey(
                user=user,
                key=f"f{i}",
                fingerprint="x",
                method="POST",
                path="/",
                recovery_point=RecoveryPoint.FINISHED,
                response_status=201,
                created_at=at,
                finished_at=at,
            )
            for i in range(finished)
        ]
        + [
            IdempotencyKey(
                user=user,
                key=f"u{i}",
                fingerprint="x",
                method="POST",
                path="/",
                recovery_point="payment_created",
                created_at=at,
            )
            for i in range(unfinished)
        ]
    )


def test_reaper_deletes_only_finished_records_past_the_window_in_batches(user, settings):
    make_records(user, finished=25, unfinished=3, age_s=settings.IDEMPOTENCY_KEY_TTL + 60)
    make_records_fresh = IdempotencyKey.objects.create(
        user=user,
        key="fresh",
        fingerprint="x",
        method="POST",
        path="/",
        recovery_point=RecoveryPoint.FINISHED,
        response_status=201,
        created_at=timezone.now(),
        finished_at=timezone.now(),
    )

    result = idempotency_key_reap(batch_size=10)

    assert result.deleted == 25
    assert result.batches == 3
    assert result.unfinished_kept == 3
    remaining = set(IdempotencyKey.objects.values_list("key", flat=True))
    assert remaining == {"u0", "u1", "u2", make_records_fresh.key}


def test_reap_command_prints_counts(user, settings, capsys):
    make_records(user, finished=2, unfinished=1, age_s=settings.IDEMPOTENCY_KEY_TTL + 60)

    call_command("reap_idempotency_keys")

    out = capsys.readouterr().out
    assert "deleted=2" in out
    assert "unfinished_kept=1" in out
