"""``manage.py audit``: cross-check the books.

Exit status: 0 clean; 1 any finding, whether nobody holds it (a fault) or an open
case does (waiting for a person). Not 0 for the waiting ones: the books still do
not balance, and whatever checks "the audit is clean" (CI, the chaos run, a
cron) must not pass over them. What tells the two apart is the output (each
line says FINDING or WAITING, the verdict counts both) and the findings gauge,
which counts faults only, so an alert on it never pages for what a person holds.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand

from operations.audit.run import AuditReport, audit_run


def summary_table(report: AuditReport) -> list[str]:
    """The summary as aligned text lines: check, rows checked, problems."""
    width = max(len(row.check) for row in report.summary)
    lines = [f"{'check':<{width}}  {'checked':>8}  {'problems':>8}  {'waiting':>8}"]
    lines += [
        f"{r.check:<{width}}  {r.checked:>8}  {r.problems - r.waiting:>8}  {r.waiting:>8}"
        for r in report.summary
    ]
    return lines


class Command(BaseCommand):
    help = (
        "Cross-check orders, payments, ledger, inventory, idempotency records, shipments "
        "and the provider's wallets (docs/design.md, invariants). Prints each finding with its "
        "ids, then a summary; exits 1 if there is any finding (a fault, or one waiting for a "
        "person because an open case holds it), 0 when clean."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        report = audit_run()
        for finding in report.findings:
            # ids as JSON: one line per finding, easy to grep and to paste into a query.
            ids = json.dumps(finding.ids, sort_keys=True, default=str)
            self.stdout.write(f"FINDING {finding.invariant}: {finding.message} {ids}")
        for finding in report.waiting:
            ids = json.dumps(finding.ids, sort_keys=True, default=str)
            self.stdout.write(f"WAITING {finding.invariant}: {finding.message} {ids}")
        if report.findings or report.waiting:
            self.stdout.write("")
        for line in summary_table(report):
            self.stdout.write(line)
        self.stdout.write(f"open cases: {report.open_cases} (manage.py cases)")
        if report.findings:
            verdict = f"{len(report.findings)} problem(s)"
        elif report.waiting:
            verdict = f"{len(report.waiting)} waiting for a person"
        else:
            verdict = "clean"
        if report.findings and report.waiting:
            verdict += f", {len(report.waiting)} waiting for a person"
        self.stdout.write(f"audit: {verdict}")
        if report.findings or report.waiting:
            sys.exit(1)
