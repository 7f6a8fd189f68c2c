"""``manage.py reconcile --once``: one pass of the periodic jobs, with their counts.

The pass is the core's (reconcile/passes.py) with the statement's leftovers in it
(operations/statements/passes.py), so the command lives here, in the room that
sees both: the core never imports the operations.

Beside a running shop, Celery beat runs the same jobs every 30 s to 5 min, so a
pass by hand usually finds that beat already did what was due: each job that
had nothing left says so, with when beat last ran it (the jobs' heartbeats),
rather than a line of zeros that reads like nothing works.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from edge.redis import REDIS_DOWN
from observability import heartbeats
from operations.statements.passes import pass_run_once


def _figure(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)  # seconds: ms precision


# Figures about how a job ran, not what it did (the reaper runs one batch even when
# it deletes nothing).
_HOW_IT_RAN = {"batches"}


def _did_nothing(counts: dict[str, Any]) -> bool:
    """Every count of work is zero (durations, flags and ``_HOW_IT_RAN`` are not work)."""
    return not any(
        value
        for name, value in counts.items()
        if isinstance(value, int) and not isinstance(value, bool) and name not in _HOW_IT_RAN
    )


def _last_runs() -> dict[str, float]:
    """When each job last succeeded, before this pass (empty if Redis cannot say)."""
    try:
        beats = heartbeats.read()
    except REDIS_DOWN:
        return {}
    prefix = heartbeats.JOB_PREFIX
    return {name.removeprefix(prefix): at for name, at in beats.items() if name.startswith(prefix)}


def _nothing_left(job: str, last_runs: dict[str, float], now: float) -> str:
    if job in last_runs:
        return f"nothing left (last run {now - last_runs[job]:.0f} s ago, by beat or by hand)"
    return "nothing to do"


class Command(BaseCommand):
    help = (
        "Run one pass of the periodic jobs (reconcile payments, complete abandoned "
        "requests, expire unpaid orders, reap idempotency keys, fulfil paid orders, open "
        "the desk's due cases) "
        "and print what each did. Beat runs them in production; this is for operators."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--once", action="store_true", help="run one pass, then exit")

    def handle(self, *args: Any, once: bool, **options: Any) -> None:
        if not once:
            # Periodic runs are beat's job (CELERY_BEAT_SCHEDULE); a second scheduler
            # in a shell loop is exactly the overlap the single-runner lock exists for.
            raise CommandError("use --once (periodic runs are Celery beat's job)")
        started = time.monotonic()
        last_runs, now = _last_runs(), time.time()
        idle = 0
        results = pass_run_once()
        for job, counts in results.items():
            if counts is None:
                self.stdout.write(f"{job}: skipped (another runner holds its lock)")
                continue
            figures = " ".join(f"{name}={_figure(value)}" for name, value in counts.items())
            if _did_nothing(counts):
                idle += 1
                figures = f"{_nothing_left(job, last_runs, now)}: {figures}"
            self.stdout.write(f"{job}: {figures}")
        if idle == len(results):
            self.stdout.write(
                "nothing was left to do: beside a running shop, Celery beat runs these jobs "
                "every 30 s to 5 min (CELERY_BEAT_SCHEDULE) and had already done what was due"
            )
        self.stdout.write(f"pass took {time.monotonic() - started:.2f} s")
