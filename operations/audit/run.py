"""The audit: one run that proves the books balance (docs/design.md, invariants), or says where not.

``audit_run`` is the interface (``manage.py audit`` and the storefront use it):

    report = audit_run()
    report.ok          # True when nothing is off and nothing waits for a person
    report.findings    # [Finding(invariant, message, ids)], one per fault
    report.waiting     # findings an open case holds: waiting for a person
    report.open_cases  # every open case on the desk
    report.summary     # [SummaryRow(check, checked, problems, waiting)], one per check

A finding waits for a person when one of its ids names a row an open case
holds (a notification, a discrepancy, a payment ...): a person has it, so it
is not a fault the audit found, and the audit-findings alert does not page
for it (the open-cases alert speaks for it, by age).

It only reads, and may run at any time: unsettled payments and unfinished
records count as problems only once they are older than the reconciler and
the lock timeout allow, so a quiescent shop audits clean while requests are
in flight. The checks live in ``checks/``; the provider's side is
read through its API, as any third party's would be.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string
from django.utils.translation import gettext_noop as _

from observability import heartbeats
from operations.audit.checks import (
    AuditContext,
    Checked,
    amounts,
    captures,
    disputes,
    inventory,
    records,
    refunds,
    statements,
)
from operations.audit.findings import AuditReport, Finding, SummaryRow
from payments.providers import PaymentProvider, get_provider
from reconcile.desk.selectors import subjects_held

__all__ = ["AuditReport", "Finding", "SummaryRow", "audit_checks", "audit_run"]

# Every check, in the order the summary lists them. Titles are marked for the demo
# pages, which show them translated; the audit itself prints them as written.
CHECKS: list[tuple[str, Callable[[AuditContext], Checked]]] = [
    (_("orders: PAID = one SUCCEEDED payment + one capture"), captures.paid_orders),
    (_("orders: amount = sum of its lines"), amounts.order_amounts),
    (_("ledger: captures match PAID orders and payments"), captures.ledger),
    (_("payments: none left unsettled"), captures.unsettled_payments),
    (_("refunds: within the capture; REFUNDED = all of it"), refunds.orders),
    (_("refunds: booked, settled; orphaned captures refunded"), refunds.refund_attempts),
    (_("notifications: none left unresolved"), refunds.notifications),
    (_("disputes: the books and the provider agree"), disputes.disputes),
    (_("statements: imported, every line matched"), statements.imports),
    (_("statements: no discrepancy left open"), statements.discrepancies),
    (_("statements: stray captures refunded"), statements.strays),
    (_("inventory: stock = movements = received - held"), inventory.products),
    (_("inventory: each order's movements match its lines"), inventory.order_movements),
    (_("records: each points at what it made, once"), records.finished_records),
    (_("records: none stuck in progress"), records.unfinished_records),
    (_("shipments: one per PAID order"), captures.shipments),
]


def audit_checks(
    provider: PaymentProvider,
) -> list[tuple[str, Callable[[AuditContext], Checked]]]:
    """Every check a run makes, in order: the shop's own (``CHECKS``), then what the
    deployment plugs in for this provider (``AUDIT_PLUGINS``: the demo's wallet check)."""
    plugged = [pair for path in settings.AUDIT_PLUGINS for pair in import_string(path)(provider)]
    return CHECKS + plugged


def audit_run(*, provider: PaymentProvider | None = None) -> AuditReport:
    """Check every invariant (read-only). The provider defaults to the configured one."""
    ctx = AuditContext(now=timezone.now(), provider=provider or get_provider())
    held = subjects_held()
    findings: list[Finding] = []
    waiting: list[Finding] = []
    summary: list[SummaryRow] = []
    for title, check in audit_checks(ctx.provider):
        checked, found = check(ctx)
        held_here = [f for f in found if _held(f, held)]
        findings += [f for f in found if not _held(f, held)]
        waiting += held_here
        summary.append(
            SummaryRow(check=title, checked=checked, problems=len(found), waiting=len(held_here))
        )
    heartbeats.audit_finished(findings=len(findings))  # the findings gauge and its alert
    return AuditReport(findings=findings, summary=summary, waiting=waiting, open_cases=len(held))


def _held(finding: Finding, held: dict[tuple[str, int], int]) -> bool:
    return any(
        isinstance(value, int) and (name, value) in held for name, value in finding.ids.items()
    )
