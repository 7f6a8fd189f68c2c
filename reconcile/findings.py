"""What the audit reports: findings and a summary (the interface ``reconcile.audit`` exposes).

Kept apart from ``audit.py`` only so the check modules (``reconcile/checks/``)
can build findings without importing the runner that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One violation: which invariant, in words, and the ids of the rows involved."""

    invariant: str
    message: str
    ids: dict[str, object]


@dataclass(frozen=True)
class SummaryRow:
    """One check: how many rows (or payers) it looked at, and how many problems it found."""

    check: str
    checked: int
    problems: int


@dataclass(frozen=True)
class AuditReport:
    """Every finding, and a summary row per check. ``ok``: nothing is off."""

    findings: list[Finding]
    summary: list[SummaryRow]

    @property
    def ok(self) -> bool:
        return not self.findings
