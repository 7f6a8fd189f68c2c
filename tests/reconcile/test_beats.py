"""Two beats, as ``make cluster`` runs them: every tick is sent twice, one pass does the work.

Real processes on the real Redis broker: two ``celery beat`` (each with its own
schedule file, as each node has) sending the product's ``reconcile-payments`` entry
every second, and one worker with two pool processes, so that two passes *could* run
side by side, as they could on two nodes' workers. What is counted comes from the
processes' own records, never from a log: beat's schedule files (what each sent),
the worker's metrics (``onceshop_reconcile_job_runs_total``: each task run or turned
away by the lock), PostgreSQL's ``pg_locks`` (the passes inside the job) and the books.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from prometheus_client import CollectorRegistry, multiprocess

from payments.models import Payment
from reconcile.passes import RECONCILE_PAYMENTS
from tests.assertions import assert_paid_once
from tests.beats import Beat
from tests.workers import Worker, start_worker

# The beat schedule's entry (config/settings/background.py) of the job under test.
ENTRY = "reconcile-payments"
# Both beats tick every second: a few seconds hold many ticks of each.
EVERY_S = 1.0
# Ticks turned away while the first pass waits inside the job: more than one tick (of
# either beat) came while a pass was running, so the lock was put to the test.
TURNED_AWAY = 3
# Beats and a worker start in seconds; this is for a machine at load 10.
PHASE_TIMEOUT_S = 60
# Above the tests' 2 s (tests/conftest.py): the sandbox in this process answers a
# charge in seconds when the machine is at load 10 or more.
PROVIDER_TIMEOUT_S = 10.0


def _sample(directory: Path, name: str, **labels: str) -> int:
    while True:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(directory))
        try:
            return int(registry.get_sample_value(name, labels) or 0)
        except struct.error:
            # A pool process's file caught the instant it was created, still empty:
            # read again (it is sized before anything is counted in it).
            continue


def runs(directory: Path, outcome: str) -> int:
    """The worker's runs of the job with ``outcome`` (ok, skipped: the lock was held, error)."""
    return _sample(
        directory, "onceshop_reconcile_job_runs_total", job=RECONCILE_PAYMENTS.name, outcome=outcome
    )


def items(directory: Path, result: str) -> int:
    """What the job's passes did, summed over every pass (claimed, rolled_forward, ...)."""
    return _sample(
        directory, "onceshop_reconcile_items_total", job=RECONCILE_PAYMENTS.name, result=result
    )


def passes_waiting_at(table: str) -> int:
    """Backends waiting for a lock on ``table``: here, passes that got into the job."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE relation = %s::regclass AND NOT granted", [table]
        )
        (count,) = cursor.fetchone()
    return int(count)


@pytest.fixture
def two_slot_worker(
    django_db_setup: Any, sandbox: str, settings: Any, tmp_path: Path
) -> Iterator[tuple[Worker, Path]]:
    """A worker with two pool processes and its own metrics directory."""
    metrics = tmp_path / "worker-metrics"
    # The provider's answers are not under test here: slow ones (a loaded machine) wait.
    settings.PROVIDER_TIMEOUT_S = PROVIDER_TIMEOUT_S
    env = {
        "PROVIDER_BASE_URL": sandbox,
        "SHOP_BASE_URL": settings.SHOP_BASE_URL,
        "PROVIDER_TIMEOUT_S": str(PROVIDER_TIMEOUT_S),
        "RECONCILE_AFTER_S": "0",
        "PROMETHEUS_MULTIPROC_DIR": str(metrics),
        # The first pass waits at the test's table lock for as long as the test holds it.
        "DATABASE_LOCK_TIMEOUT_MS": str(PHASE_TIMEOUT_S * 1000),
    }
    for worker in start_worker(env, concurrency=2):
        yield worker, metrics


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_beats_send_every_tick_and_the_lock_lets_one_pass_in_at_a_time(
    two_slot_worker, unknown_payment, user, wallet, tmp_path
):
    worker, metrics = two_slot_worker
    # Given an attempt the provider charged, its answer lost (one reconcile settles it)
    payment = unknown_payment(user, charged=True)
    table = Payment._meta.db_table
    beats: list[Beat] = []
    try:
        # ... and the payments table held by the test (SHARE: no row can be claimed):
        # a pass that gets into the job waits at its claim, for as long as the test holds
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {table} IN SHARE MODE")

            # When two beats tick every second
            beats = [
                Beat(schedule=tmp_path / f"beat-{n}-schedule", jobs=[ENTRY], every_s=EVERY_S)
                for n in (1, 2)
            ]

            # Then while one pass waits inside the job, the ticks that follow are turned
            # away by the lock: never two passes in the job at once
            inside: list[int] = []

            def turned_away_or_two_inside() -> bool:
                inside.append(passes_waiting_at(table))
                return inside[-1] >= 2 or runs(metrics, "skipped") >= TURNED_AWAY

            worker.wait_for(
                turned_away_or_two_inside,
                timeout=PHASE_TIMEOUT_S,
                what=f"{TURNED_AWAY} ticks turned away while a pass is in the job",
            )
            assert max(inside) == 1, f"{max(inside)} passes of {ENTRY} were in the job at once"

        # Then, once let go, the pass in the job settles the attempt, and later ticks
        # (both beats', one pass after the other) find nothing left
        worker.wait_for(
            lambda: Payment.objects.get(pk=payment.pk).status == "SUCCEEDED",
            timeout=PHASE_TIMEOUT_S,
            what="the waiting pass to settle the attempt",
        )
        later = runs(metrics, "ok") + 2
        worker.wait_for(
            lambda: runs(metrics, "ok") >= later, timeout=PHASE_TIMEOUT_S, what="later passes"
        )
    finally:
        for beat in beats:
            beat.stop()
    # ... every tick sent has been run (the provider's retried notification aside)
    worker.settle()

    # Both beats sent every tick, and every tick sent was run or turned away exactly
    # once (none lost, none run twice)
    sent = [beat.sent(ENTRY) for beat in beats]
    assert min(sent) >= 3, sent
    ran, turned_away = runs(metrics, "ok"), runs(metrics, "skipped")
    assert turned_away >= TURNED_AWAY
    assert ran + turned_away == sum(sent), (ran, turned_away, sent)
    assert runs(metrics, "error") == 0
    # ... and the books are what one beat would have left: claimed and rolled forward
    # by one pass, one ledger entry, one debit at the provider
    assert (items(metrics, "claimed"), items(metrics, "rolled_forward")) == (1, 1)
    assert_paid_once(payment.order, user, wallet)
