"""The daily statement (invariant 7 of docs/design.md, its statement half).

No statement discrepancy is open; no statement failed to import and stayed so,
nor was never read at all (an import row without a complete download is not a
day with nothing to match); no line is left unmatched once the reconciler had
its time; every stray capture (a capture no attempt of ours recorded) was
refunded.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Q

from edge.money import money
from operations.audit.checks import AuditContext, Checked
from operations.audit.findings import Finding
from operations.statements.models import (
    LineOutcome,
    StatementDiscrepancy,
    StatementImport,
    StatementLine,
)
from payments.models import RefundAttemptStatus
from reconcile.models import StrayCapture

DISCREPANCY_RESOLVED = "statement-discrepancy-resolved"
STATEMENT_IMPORTED = "statement-imported"
LINE_MATCHED = "statement-line-matched"
STRAY_REFUNDED = "stray-capture-refunded"


def discrepancies(ctx: AuditContext) -> Checked:
    """Every discrepancy a statement found is resolved (by a later statement or by staff)."""
    open_ = StatementDiscrepancy.objects.filter(resolved_at__isnull=True)
    findings = [
        Finding(
            DISCREPANCY_RESOLVED,
            f"statement {d['day']}: {d['kind']}: {d['reason']}",
            {"discrepancy": d["pk"], "line": d["line_id"], "ledger_entry": d["ledger_entry_id"]},
        )
        for d in open_.order_by("pk").values(
            "pk", "day", "kind", "reason", "line_id", "ledger_entry_id"
        )
    ]
    return StatementDiscrepancy.objects.count(), findings


def imports(ctx: AuditContext) -> Checked:
    """Every statement was imported, and its lines matched once the reconciler had its time."""
    # A line whose attempt was in flight waits for the next pass; one older than the
    # reconciler's delay (twice: its pass comes every RECONCILE_AFTER_S / 2) is missed.
    due_before = ctx.now - timedelta(seconds=2 * settings.RECONCILE_AFTER_S)
    # Failed (its reason kept), or never read whole: a download that died without a
    # word (a killed process) leaves downloads = 0 too. Younger: still downloading.
    unread = Q(downloads=0, created_at__lt=due_before)
    findings = [
        Finding(
            STATEMENT_IMPORTED,
            f"statement {s['provider']} {s['day']} not imported: "
            + (s["error"] or "never downloaded whole"),
            {"statement": s["pk"], "day": str(s["day"])},
        )
        for s in StatementImport.objects.filter(~Q(error="") | unread)
        .order_by("day")
        .values("pk", "provider", "day", "error")
    ]
    findings += [
        Finding(
            LINE_MATCHED,
            f"statement {line['statement__day']}, line {line['line_no']}: {line['kind']} "
            f"{line['provider_id']} ({line['reference']}) left unmatched",
            {"line": line["pk"], "statement": line["statement_id"]},
        )
        for line in StatementLine.objects.filter(
            outcome=LineOutcome.PENDING, statement__covered_until__lt=due_before
        )
        .order_by("pk")
        .values(
            "pk", "statement_id", "statement__day", "line_no", "kind", "provider_id", "reference"
        )
    ]
    return StatementImport.objects.count(), findings


def strays(ctx: AuditContext) -> Checked:
    """Every stray capture went back to the payer once the reconciler had its time."""
    due_before = ctx.now - timedelta(seconds=2 * settings.RECONCILE_AFTER_S)
    findings = [
        Finding(
            STRAY_REFUNDED,
            f"stray capture {s['trade_no']} of {money(s['amount'], s['currency'])} for "
            f"{s['out_trade_no']} (no attempt of ours): refund {s['refund_status']} "
            f"{s['failure_code']}".rstrip(),
            {"stray": s["pk"], "out_trade_no": s["out_trade_no"]},
        )
        for s in StrayCapture.objects.exclude(refund_status=RefundAttemptStatus.SUCCEEDED)
        .filter(created_at__lt=due_before)
        .order_by("pk")
        .values(
            "pk", "trade_no", "amount", "currency", "out_trade_no", "refund_status", "failure_code"
        )
    ]
    return StrayCapture.objects.count(), findings
