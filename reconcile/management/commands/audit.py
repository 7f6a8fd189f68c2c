"""``manage.py audit``: cross-check the books; exit 1 if anything is off, 0 when clean."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand

from reconcile.audit import AuditReport, audit_run


def summary_table(report: AuditReport) -> list[str]:
    """The summary as aligned text lines: check, rows checked, problems."""
    width = max(len(row.check) for row in report.summary)
    lines = [f"{'check':<{width}}  {'checked':>8}  {'problems':>8}"]
    lines += [f"{r.check:<{width}}  {r.checked:>8}  {r.problems:>8}" for r in report.summary]
    return lines


class Command(BaseCommand):
    help = (
        "Cross-check orders, payments, ledger, inventory, idempotency records, shipments "
        "and the provider's wallets (DESIGN.md section 9). Prints each finding with its "
        "ids, then a summary; exits 1 if anything is off."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        report = audit_run()
        for finding in report.findings:
            # ids as JSON: one line per finding, easy to grep and to paste into a query.
            ids = json.dumps(finding.ids, sort_keys=True, default=str)
            self.stdout.write(f"FINDING {finding.invariant}: {finding.message} {ids}")
        if report.findings:
            self.stdout.write("")
        for line in summary_table(report):
            self.stdout.write(line)
        verdict = "clean" if report.ok else f"{len(report.findings)} problem(s)"
        self.stdout.write(f"audit: {verdict}")
        if not report.ok:
            sys.exit(1)
