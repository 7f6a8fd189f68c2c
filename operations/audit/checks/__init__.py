"""The audit's checks, one module per area of the invariants in docs/design.md.

Every check is a read-only function ``check(ctx) -> (checked, findings)``:
how many rows it looked at, and a finding per violation. Each invariant is a
query for its violators, so a finding names exactly the rows to look at.
Invariant names are module constants (stable: tests and dashboards match them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Expression, F, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce

from operations.audit.findings import Finding
from payments.providers import PaymentProvider


@dataclass(frozen=True)
class AuditContext:
    """What every check may need: one clock for the whole run, and the provider."""

    now: datetime
    provider: PaymentProvider

    @property
    def in_flight_since(self) -> datetime:
        """An unsettled payment updated since then is in flight, not a finding.

        A request may still be between its provider call and its settlement; the
        reconciler only takes attempts older than RECONCILE_AFTER_S, so only then
        is one left unsettled (and a charge nobody booked) something to look at.
        """
        return self.now - timedelta(seconds=settings.RECONCILE_AFTER_S)


def sum_of(rows: QuerySet[Any], *, group: str, field: str | Expression | F) -> Coalesce:
    """A correlated subquery: SUM(field) of ``rows`` grouped by ``group``, 0 if none."""
    summed = rows.values(group).annotate(total=Sum(field)).values("total")
    return Coalesce(Subquery(summed), 0)


Checked = tuple[int, list[Finding]]
