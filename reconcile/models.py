"""The models Django loads for the reconcile app, each defined in its room.

- statements (reconcile/statements/models.py): ``StatementImport``,
  ``StatementLine``, ``StatementDiscrepancy`` and their choices;
- recovery (reconcile/recovery/models.py): ``StrayCapture``;
- the operator's desk (reconcile/desk/models.py): ``Case``, ``CaseAction``,
  ``ItemFailure``.

Imported here so the app label, the tables and the migrations stay as they were.
"""

from reconcile.desk.models import Case, CaseAction, ItemFailure
from reconcile.recovery.models import StrayCapture
from reconcile.statements.models import (
    SANDBOX,
    DiscrepancyKind,
    LineKind,
    LineOutcome,
    StatementDiscrepancy,
    StatementImport,
    StatementLine,
)

__all__ = [
    "SANDBOX",
    "Case",
    "CaseAction",
    "DiscrepancyKind",
    "ItemFailure",
    "LineKind",
    "LineOutcome",
    "StatementDiscrepancy",
    "StatementImport",
    "StatementLine",
    "StrayCapture",
]
