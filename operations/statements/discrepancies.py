"""Staff resolving a statement discrepancy: recorded with who, when and why, never deleted."""

from __future__ import annotations

from django.utils import timezone

from operations.statements.models import StatementDiscrepancy


class ResolutionNoteMissing(ValueError):
    """A discrepancy is resolved with a note saying how, or not at all."""


def discrepancy_resolve(*, discrepancy_id: int, user_id: int, note: str) -> bool:
    """Mark an open discrepancy resolved; False if it was resolved already (kept as it was).

    Conditional on ``resolved_at IS NULL``: of two people resolving it at once,
    the first one's note stands.
    """
    note = note.strip()
    if not note:
        raise ResolutionNoteMissing("say how it was resolved")
    return bool(
        StatementDiscrepancy.objects.filter(pk=discrepancy_id, resolved_at__isnull=True).update(
            resolved_at=timezone.now(), resolved_by_id=user_id, resolution=note
        )
    )
