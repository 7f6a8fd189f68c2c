"""One pass of everything (``manage.py reconcile --once``), the thin tasks and beat's schedule."""

from __future__ import annotations

import importlib
from io import StringIO

import pytest
from celery.schedules import crontab
from django.core.management import CommandError, call_command

from idempotency.models import IdempotencyKey
from operations.statements.passes import JOBS
from orders.models import Order, Shipment
from payments.models import Payment
from reconcile import tasks
from reconcile.locks import single_runner
from reconcile.passes import RECONCILE_PAYMENTS
from tests.conftest import new_key


@pytest.mark.django_db(transaction=True)
def test_reconcile_once_runs_every_job_and_prints_its_counts(
    pay, fault, order, user, wallet, due_at_once
):
    # Given a payment that timed out after the provider charged it
    fault("error_after_commit")
    key = new_key()
    assert pay(key).status_code == 503

    out = StringIO()
    call_command("reconcile", "--once", stdout=out)

    lines = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines[: len(JOBS)]] == [job.name for job in JOBS]
    assert "rolled_forward=1" in lines[0]
    assert "completed=1" in lines[0]
    assert lines[-1].startswith("pass took")
    # Rolled forward, answered, and shipped in the same pass
    assert Order.objects.get(pk=order.pk).status == "PAID"
    assert IdempotencyKey.objects.get(key=key).response_status == 200
    assert Shipment.objects.get().order_id == order.pk


@pytest.mark.django_db
def test_reconcile_once_after_beat_says_nothing_was_left_rather_than_only_zeros():
    # Given a pass already ran (as beat's tasks do beside a running demo)
    call_command("reconcile", "--once", stdout=StringIO())

    out = StringIO()
    call_command("reconcile", "--once", stdout=out)

    lines = out.getvalue().splitlines()
    for job, line in zip(JOBS, lines, strict=False):
        assert line.startswith(f"{job.name}: nothing left (last run "), out.getvalue()
        assert line.endswith("=0") or "=0 " in line  # the counts are still shown
    assert lines[len(JOBS)].startswith("nothing was left to do: ")
    assert "Celery beat" in lines[len(JOBS)]
    assert lines[-1].startswith("pass took")


@pytest.mark.django_db
def test_reconcile_without_once_is_refused():
    with pytest.raises(CommandError, match="--once"):
        call_command("reconcile")


@pytest.mark.django_db
def test_a_task_does_nothing_while_another_runner_holds_its_lock():
    with single_runner(name=RECONCILE_PAYMENTS.name) as mine:
        assert mine
        assert tasks.reconcile_payments() is None

    assert tasks.reconcile_payments() == {
        "claimed": 0,
        "rolled_forward": 0,
        "rolled_back": 0,
        "already_settled": 0,
        "orphaned": 0,
        "unreachable": 0,
        "awaiting_customer": 0,
        "conflict": 0,
        "error": 0,
        "completed": 0,
        "handed_back": 0,
    }


@pytest.mark.django_db
def test_every_task_runs_its_job():
    completed = tasks.complete_abandoned_requests()
    expired = tasks.expire_unpaid_orders()
    shipped = tasks.fulfil_paid_orders()

    assert completed is not None
    assert set(completed.values()) == {0}
    assert expired == {"expired": 0, "skipped_live_attempt": 0, "failed": 0}
    assert shipped == {"examined": 0, "shipped": 0, "failed": 0}
    assert not Payment.objects.exists()


def test_beat_schedules_every_periodic_job(settings):
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert {entry["task"] for entry in schedule.values()} == {
        "reconcile.tasks.reconcile_payments",
        "reconcile.tasks.reconcile_notifications",
        "reconcile.tasks.reconcile_refunds",
        "reconcile.tasks.complete_abandoned_requests",
        "reconcile.tasks.expire_unpaid_orders",
        "idempotency.tasks.reap_idempotency_keys",
        "reconcile.tasks.fulfil_paid_orders",
        "callbacks.tasks.strip_unmatched_notification_bodies",
        "operations.audit.tasks.audit_books",  # feeds the audit-findings gauge and alert
        "operations.statements.tasks.reconcile_statement",
        "operations.statements.tasks.reconcile_statement_leftovers",
        "demo.sandbox.tasks.sweep_lost_messages",  # the demo's provider (DEMO_MODE)
        "reconcile.tasks.open_cases",  # the desk's cases that time opens
    }
    for entry in schedule.values():
        module, _, name = str(entry["task"]).rpartition(".")
        task = getattr(importlib.import_module(module), name)
        assert task.name == entry["task"]  # what beat sends is what a worker knows
        every = entry["schedule"]
        if isinstance(every, crontab):  # the daily statement, once yesterday is over
            assert every == crontab(hour=0, minute=30)
        else:
            assert 0 < float(str(every)) <= 3600


def test_the_lock_outlives_a_pass(settings):
    # A pass stops taking work after its budget; the task is killed at the time
    # limit; the lock must still be held then, or a second runner could start.
    assert settings.RECONCILE_PASS_BUDGET_S < settings.CELERY_TASK_TIME_LIMIT
    assert settings.CELERY_TASK_TIME_LIMIT < settings.RECONCILE_LOCK_TTL_S
    # And an unknown attempt waits longer than any request's provider call.
    assert settings.PROVIDER_TIMEOUT_S < settings.RECONCILE_AFTER_S
