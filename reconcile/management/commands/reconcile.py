"""``manage.py reconcile --once``: one pass of the periodic jobs, with their counts."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from reconcile.passes import pass_run_once


def _figure(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)  # seconds: ms precision


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
        for job, counts in pass_run_once().items():
            if counts is None:
                self.stdout.write(f"{job}: skipped (another runner holds its lock)")
            else:
                figures = " ".join(f"{name}={_figure(value)}" for name, value in counts.items())
                self.stdout.write(f"{job}: {figures}")
        self.stdout.write(f"pass took {time.monotonic() - started:.2f} s")
