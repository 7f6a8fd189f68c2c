"""The person at the operator's desk, at the end of a run: every case the run opened
is closed by a person's action that is on the record (docs/operating.md, "The
operator's desk"), through the desk's own service, as two real users: one asks for
each refund or accept, the other approves it (DESK_APPROVAL_ABOVE keeps its default,
0, in the run: every one needs a second person).

First pass (``desk_act``): what fits the case and moves it forward (refund a stray,
accept the provider's word, retry a failed item). The background work then runs
again, and the second pass (``desk_dismiss``) dismisses, with a reason, what is
still open: nothing is left for a later person.
"""

from __future__ import annotations

from typing import Any

from tools.chaos.history import History

FIRST, SECOND = "chaos-operator-1", "chaos-operator-2"
NOTE = "chaos run: the person at the desk"


def desk_operators_create() -> None:
    """The two users, each holding every desk permission."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    permissions = list(
        Permission.objects.filter(
            content_type__app_label="reconcile",
            codename__in=[f"{a}_case" for a in ("retry", "refund", "accept", "dismiss", "approve")],
        )
    )
    for username in (FIRST, SECOND):
        user = get_user_model().objects.create_user(username=username, password=None, is_staff=True)
        user.user_permissions.add(*permissions)


def desk_act(history: History) -> int:
    """Take the action that fits each open case (a refund or accept approved by the
    second person); how many cases it acted on."""
    from reconcile.desk.actions import ACTIONS
    from reconcile.desk.models import CaseActionKind
    from reconcile.desk.selectors import cases_open

    first, second = _operators()
    acted = 0
    for case in list(cases_open()):
        offered = ACTIONS.get(case.kind, ())
        chosen = next(
            (a for a in (CaseActionKind.REFUND, CaseActionKind.ACCEPT) if a in offered),
            CaseActionKind.RETRY if CaseActionKind.RETRY in offered else None,
        )
        if chosen is None:
            continue
        _act(history, case.pk, chosen, first)
        if chosen in (CaseActionKind.REFUND, CaseActionKind.ACCEPT):
            _act(history, case.pk, CaseActionKind.APPROVE, second)
        acted += 1
    return acted


def desk_dismiss(history: History) -> int:
    """Dismiss, with a reason, every case still open; how many."""
    from reconcile.desk.models import CaseActionKind
    from reconcile.desk.selectors import cases_open

    first, _ = _operators()
    open_cases = list(cases_open())
    for case in open_cases:
        _act(history, case.pk, CaseActionKind.DISMISS, first)
    return len(open_cases)


def _operators() -> tuple[Any, Any]:
    from django.contrib.auth import get_user_model

    users = get_user_model().objects
    return users.get(username=FIRST), users.get(username=SECOND)


def _act(history: History, case_id: int, action: str, user: Any) -> None:
    from reconcile.desk.actions import CaseActionRefused, case_act

    try:
        result = case_act(case_id=case_id, action=action, note=NOTE, user=user)
        said, acted = result.message, result.acted
    except CaseActionRefused as refused:
        said, acted = f"refused: {refused}", False
    history.record(
        "desk", case=case_id, action=action, by=user.get_username(), acted=acted, said=said
    )
