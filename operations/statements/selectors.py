"""Reads of the statement for the operators' gauges (docs/operating.md): few rows."""

from __future__ import annotations

from observability.selectors import count_and_age
from operations.statements.models import StatementDiscrepancy


def discrepancies_open() -> tuple[float, float]:
    """Open statement discrepancies (the partial index of open ones): count, oldest age."""
    return count_and_age(StatementDiscrepancy.objects.filter(resolved_at__isnull=True), "opened_at")
