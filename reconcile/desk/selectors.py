"""What the desk holds: open cases, and the subjects a person holds (for the audit)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from reconcile.desk.models import Case, CaseActionKind, CaseApproval, CaseState


def cases_open() -> QuerySet[Case]:
    """Every open case, oldest first."""
    return Case.objects.filter(state=CaseState.OPEN).order_by("opened_at", "id")


def notifications_held() -> QuerySet[Case, Any]:
    """The notifications an open case holds (as a subquery of ids)."""
    return cases_open().filter(subject_type="notification").values("subject_id")


def subjects_held() -> dict[tuple[str, int], int]:
    """(subject type, id) -> the open case holding it."""
    return {
        (subject_type, subject_id): pk
        for pk, subject_type, subject_id in cases_open().values_list(
            "pk", "subject_type", "subject_id"
        )
    }


def case_actions(case: Case, *, awaiting_approval: bool | None = None) -> tuple[str, ...]:
    """The actions an open case offers: those that fit its kind, and ``approve`` while a
    refund or accept asked for on it awaits a second person."""
    from reconcile.desk.actions import ACTIONS

    if awaiting_approval is None:
        awaiting_approval = case.approvals.filter(state=CaseApproval.State.PENDING).exists()
    offered = ACTIONS.get(case.kind, ())
    return (*offered, CaseActionKind.APPROVE) if awaiting_approval else offered


def case_age_s(case: Case, *, now: datetime) -> float:
    return max(0.0, (now - case.opened_at).total_seconds())


def cases_open_count_and_age() -> tuple[float, float]:
    """How many cases are open, and how long the oldest has waited (the alert's gauge)."""
    from observability.selectors import count_and_age

    return count_and_age(cases_open(), "opened_at")
