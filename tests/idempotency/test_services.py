"""The reaper: finished records leave after the window, unfinished ones never."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
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


@pytest.mark.django_db(transaction=True)
def test_a_reap_with_one_record_the_database_refuses_reaps_all_the_others(
    user, settings, poison, capsys
):
    from operations.audit.run import audit_run
    from reconcile.desk.actions import case_act
    from reconcile.desk.models import Case, CaseState, ItemFailure
    from tests.factories import desk_operator

    # Given 25 finished records past the window; one of them cannot be deleted
    settings.CASE_AFTER_FAILURES = 2
    settings.RECONCILE_BACKOFF_BASE_S = 0  # due again at once: two runs, two tries
    make_records(user, finished=25, unfinished=0, age_s=settings.IDEMPOTENCY_KEY_TTL + 60)
    bad = IdempotencyKey.objects.get(key="f7")
    poison("idempotency_idempotencykey", f"OLD.id = {bad.pk}", event="DELETE")

    first = idempotency_key_reap(batch_size=10)

    # Then every other record is gone; the refused one is counted, not a case yet
    assert (first.deleted, first.failed) == (24, 1)
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["f7"]
    failure = ItemFailure.objects.get()
    assert (failure.job, failure.key, failure.reference) == ("reap-keys", str(bad.pk), "f7")
    assert not Case.objects.exists()

    # And the second failure in a row is a case about the record (beat's task, the
    # command and a pass all run the reaper in failure isolation)
    call_command("reap_idempotency_keys")
    assert "deleted=0" in capsys.readouterr().out
    case = Case.objects.get()
    assert (case.kind, case.subject_type, case.subject_id, case.job) == (
        "item-failed",
        "record",
        bad.pk,
        "reap-keys",
    )
    assert audit_run().open_cases == 1

    # When the person dismisses the case (the record is the reaper's to retry)
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER test_poison_0 ON idempotency_idempotencykey")
    assert case_act(
        case_id=case.pk, action="dismiss", note="trigger removed", user=desk_operator()
    ).acted

    # Then the next run reaps it, and nothing waits for a person
    assert idempotency_key_reap().deleted == 1
    assert Case.objects.get().state == CaseState.RESOLVED
    assert not ItemFailure.objects.exists()
    report = audit_run()
    assert (report.findings, report.open_cases) == ([], 0)
