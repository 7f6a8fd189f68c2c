"""What the audit reports: findings and a summary (the interface ``operations.audit.run`` exposes).

Kept apart from ``run.py`` only so the check modules (``operations/audit/checks/``)
can build findings without importing the runner that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Finding:
    """One violation: which invariant, in words, and the ids of the rows involved."""

    invariant: str
    message: str
    ids: dict[str, object]


@dataclass(frozen=True)
class SummaryRow:
    """One check: how many rows (or payers) it looked at, how many problems it found,
    and how many of those wait for a person (an open case holds them)."""

    check: str
    checked: int
    problems: int
    waiting: int = 0


@dataclass(frozen=True)
class AuditReport:
    """Every finding, and a summary row per check.

    ``findings`` are faults: nobody holds them. ``waiting`` are findings whose row
    an open case holds (waiting for a person, see reconcile/desk/); ``open_cases``
    counts every open case. ``ok``: nothing is off and nothing waits.
    """

    findings: list[Finding]
    summary: list[SummaryRow]
    waiting: list[Finding] = field(default_factory=list)
    open_cases: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings and not self.waiting
