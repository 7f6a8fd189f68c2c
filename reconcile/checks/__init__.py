"""The audit's checks, one module per area of DESIGN.md section 9.

Every check is a read-only function ``check(ctx) -> (checked, findings)``:
how many rows it looked at, and a finding per violation. Each invariant is a
query for its violators, so a finding names exactly the rows to look at.
Invariant names are module constants (stable: tests and dashboards match them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from payments.providers import PaymentProvider
from reconcile.findings import Finding


@dataclass(frozen=True)
class AuditContext:
    """What every check may need: one clock for the whole run, and the provider."""

    now: datetime
    provider: PaymentProvider


Checked = tuple[int, list[Finding]]
