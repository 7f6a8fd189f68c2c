"""The chaos run's person at the desk (tools/chaos/desk.py): every open case closed by a
recorded action of a real user, refunds and accepts approved by the second one."""

import pytest

from callbacks.models import ProviderNotification
from reconcile.desk.models import Case, CaseAction, CaseState
from reconcile.desk.services import notification_case_open
from reconcile.models import StrayCapture
from tests.operations.statements.helpers import stray_charge
from tools.chaos.books import books_read
from tools.chaos.checker import check
from tools.chaos.desk import SECOND, desk_act, desk_dismiss, desk_operators_create
from tools.chaos.history import History, history_read

pytestmark = pytest.mark.django_db(transaction=True)


def _held_notification(notify_id: str, out_trade_no: str, trade_no: str, amount: int) -> None:
    notification = ProviderNotification.objects.create(
        notify_id=notify_id,
        trade_no=trade_no,
        out_trade_no=out_trade_no,
        trade_status="SUCCESS",
        amount=amount,
        currency="CNY",
        outcome=ProviderNotification.Outcome.UNMATCHED,
        response_status=422,
        response_body={},
    )
    notification_case_open(notification=notification, why="the provider did not answer")


def test_the_person_at_the_desk_closes_every_case_on_the_record(user, sandbox, tmp_path):
    # Given a case about a real stray capture and one about a capture nobody made
    desk_operators_create()
    _held_notification("N-1", *stray_charge(user, amount=640), 640)
    _held_notification("N-2", "P-NEVER-1", "T-NEVER-1", 999)
    history = History(tmp_path / "history.jsonl")

    # When the desk acts, then dismisses what is left
    assert desk_act(history) == 2
    assert desk_dismiss(history) == 1  # the provider confirmed no capture of the second
    history.close()

    # Then the stray is refunded on two people's word, and no case is left open
    assert StrayCapture.objects.get().refund_status == "SUCCEEDED"
    assert not Case.objects.filter(state=CaseState.OPEN).exists()
    assert CaseAction.objects.filter(approved_by__username=SECOND).count() == 2  # both tried
    books = books_read(received={}, audit=(0, ""))
    desk_rules = {"case closed", "case closed by a recorded action"}
    assert [v for v in check(history_read(history.path), books) if v.rule in desk_rules] == []
    done = [e for e in history_read(history.path) if e["type"] == "desk"]
    assert [(e["action"], e["acted"]) for e in done] == [
        ("refund", False),  # asked for: awaits approval
        ("approve", True),
        ("refund", False),
        ("approve", False),  # the provider confirms no capture: nothing refunded
        ("dismiss", True),
    ]
