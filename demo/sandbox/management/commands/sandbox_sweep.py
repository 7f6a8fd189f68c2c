"""``manage.py sandbox_sweep``: one run of the sandbox's safety net, now, instead of
at beat's next minute (demo/sandbox/services/sweeps.py).

``--after-s`` is the grace a scheduled move or a never-tried notification gets
before the sweep does it itself (default: the sweep's own); ``sent`` counts the
notifications it sent again. The chaos run's quiesce passes ``--after-s 0``: its
faults are over, and a move the sweep makes while its own message is still on
the way is made once all the same (settling claims the row first; the shop
dedupes a notification on its id).

$ python manage.py sandbox_sweep --after-s 0
sent 0, late charges 1, late refunds 0, reversals 0, disputes 0 opened 0 lost, failed 0
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from demo.sandbox.services.sweeps import SWEEP_AFTER_S, sandbox_sweep_run_once

# A week: a grace longer than that would leave any lost message to the next sweep.
MAX_AFTER_S = 7 * 24 * 3600


class Command(BaseCommand):
    help = "Run the sandbox's sweep of lost messages and overdue scheduled moves once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--after-s",
            type=float,
            default=SWEEP_AFTER_S,
            help=f"grace before the sweep acts itself (default {SWEEP_AFTER_S} s)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not 0 <= options["after_s"] <= MAX_AFTER_S:  # NaN and infinity too
            raise CommandError(f"--after-s must be from 0 to {MAX_AFTER_S} (seconds)")
        counts = sandbox_sweep_run_once(after_s=options["after_s"])
        self.stdout.write(
            f"sent {counts.notifications_enqueued}, "
            f"late charges {counts.late_charges_settled}, "
            f"late refunds {counts.late_refunds_settled}, "
            f"reversals {counts.refunds_reversed}, "
            f"disputes {counts.disputes_opened} opened {counts.disputes_closed} lost, "
            f"failed {counts.failed}"
        )
