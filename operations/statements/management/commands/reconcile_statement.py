"""``manage.py reconcile_statement --date YYYY-MM-DD [--report]``: a day's statement.

Without ``--report``: import the provider's statement of that UTC day (once per
provider and day, however often this runs: a rerun adds only new lines) and
match it against the ledger, then print what it did and the day's report.
With ``--report``: only print the report (read-only). Exits 1 when the
statement could not be imported (unreadable, or the provider did not answer).
"""

from __future__ import annotations

from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from operations.statements.importing import StatementFailed, statement_reconcile
from operations.statements.jobs import yesterday
from operations.statements.report import report_lines, statement_report


def _day(raw: str) -> date:
    try:
        return date.fromisoformat(raw)
    except ValueError as error:
        raise CommandError(f"--date must be a day written YYYY-MM-DD, not {raw!r}") from error


class Command(BaseCommand):
    help = (
        "Import the provider's statement of a UTC day (once per day, however often it "
        "runs) and match it against the ledger; --report only prints the day's report."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--date", help="the UTC day, YYYY-MM-DD (default: yesterday)")
        parser.add_argument(
            "--report", action="store_true", help="print the day's report only (read-only)"
        )

    def handle(self, *args: Any, date: str | None, report: bool, **options: Any) -> None:
        day = _day(date) if date else yesterday()
        if not report:
            try:
                counts = statement_reconcile(day=day)
            except StatementFailed as error:
                raise CommandError(f"statement {day} not imported: {error}") from error
            figures = " ".join(f"{k}={v}" for k, v in vars(counts).items() if k != "day")
            self.stdout.write(f"statement {day}: {figures}")
        for line in report_lines(statement_report(day=day)):
            self.stdout.write(line)
