"""The models Django loads for the reconcile app, each defined in its room.

- recovery (reconcile/recovery/models.py): ``StrayCapture``;
- the operator's desk (reconcile/desk/models.py): ``Case``, ``CaseAction``,
  ``ItemFailure``.

Imported here so the app label, the tables and the migrations stay as they were.
(The provider's statement is an operations room of its own, with its own app:
operations/statements/models.py.)
"""

from reconcile.desk.models import Case, CaseAction, ItemFailure
from reconcile.recovery.models import StrayCapture

__all__ = [
    "Case",
    "CaseAction",
    "ItemFailure",
    "StrayCapture",
]
