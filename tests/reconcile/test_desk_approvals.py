"""The desk's money under control (docs/operating.md, "The operator's desk"): a
permission per action, a second person for refunds and accepts above
DESK_APPROVAL_ABOVE, every action that moved money recorded with who did it (even
when the case was closed meanwhile), no 500 when the provider cannot answer, a
dismissed problem that comes back, and a command line that names real users."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from callbacks.models import ProviderNotification
from operations.audit.run import audit_run
from orders.models import Order
from payments.models import Payment
from reconcile.desk.actions import CaseActionForbidden, case_act
from reconcile.desk.models import Case, CaseAction, CaseApproval, CaseKind, CaseState
from reconcile.desk.services import cases_run_once, notification_case_open
from reconcile.models import StrayCapture
from reconcile.recovery import fulfilment, strays
from reconcile.recovery import unsettled_payments as payment_jobs
from tests.factories import desk_operator
from tests.operations.statements.helpers import stray_charge

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def unresolved_case(user, sandbox, unknown_payment, settings, due_at_once) -> tuple[Case, Payment]:
    """An attempt the provider charged, unresolved past CASE_AFTER_S: its case is open."""
    settings.CASE_AFTER_S = 3600
    payment = unknown_payment(user, charged=True)
    Payment.objects.filter(pk=payment.pk).update(
        created_at=timezone.now() - timedelta(hours=2),
        next_reconcile_at=timezone.now() + timedelta(hours=1),
    )
    assert cases_run_once().opened == 1
    return Case.objects.get(), payment


@pytest.fixture
def stray_case(user, sandbox, due_at_once) -> Case:
    """A capture for a reference the shop never used, notified and held by a case."""
    out_trade_no, trade_no = stray_charge(user, amount=640)
    notification = ProviderNotification.objects.create(
        notify_id="N-stray-1",
        trade_no=trade_no,
        out_trade_no=out_trade_no,
        trade_status="SUCCESS",
        amount=640,
        currency="CNY",
        outcome=ProviderNotification.Outcome.UNMATCHED,
        response_status=422,
        response_body={},
    )
    notification_case_open(notification=notification, why="the provider did not answer")
    return Case.objects.get()


def actions(case: Case) -> list[tuple[str, str, str | None]]:
    return [
        (a.action, a.by_name, a.approved_by.username if a.approved_by else None)
        for a in CaseAction.objects.filter(case=case).select_related("approved_by")
    ]


# --- A permission per action ------------------------------------------------------------


def test_each_action_needs_its_own_permission(stray_case):
    dismisser = desk_operator("dismiss", username="dana")

    with pytest.raises(CaseActionForbidden, match=r"reconcile\.refund_case"):
        case_act(case_id=stray_case.pk, action="refund", note="not ours", user=dismisser)

    # Refused before anything was looked up at the provider or written
    assert not StrayCapture.objects.exists()
    assert not CaseAction.objects.exists()
    assert not CaseApproval.objects.exists()
    assert case_act(case_id=stray_case.pk, action="dismiss", note="seen", user=dismisser).acted


def test_the_admin_refuses_an_action_without_its_permission_with_a_message(stray_case):
    # Staff with the admin's change permission on cases, but not the refund's
    clerk = desk_operator("dismiss", username="clerk")
    from django.contrib.auth.models import Permission

    clerk.user_permissions.add(Permission.objects.get(codename="change_case"))
    page = Client()
    page.force_login(clerk)

    answer = page.post(
        f"/admin/reconcile/case/{stray_case.pk}/change/",
        {"action": "refund", "note": "not ours"},
        follow=True,
    )

    assert answer.status_code == 200
    assert "may not refund cases" in answer.content.decode()
    assert not StrayCapture.objects.exists()


# --- A second person above DESK_APPROVAL_ABOVE ----------------------------------------


def test_a_refund_waits_for_a_second_person_and_the_requester_cannot_approve_it(
    stray_case, wallet, user
):
    alice = desk_operator("refund", "approve", username="alice")
    bob = desk_operator("approve", username="bob")
    carol = desk_operator("refund", username="carol")  # may refund, may not approve

    # When alice asks for the refund (DESK_APPROVAL_ABOVE is 0: every one needs two)
    asked = case_act(case_id=stray_case.pk, action="refund", note="not ours", user=alice)

    # Then nothing is refunded yet; the request waits, recorded
    assert not asked.acted
    assert "awaiting a second person's approval" in asked.message
    assert not StrayCapture.objects.exists()
    assert Case.objects.get().state == CaseState.OPEN
    # The case offers approve now, in the admin as on /books/
    page = Client()
    page.force_login(_superuser())
    admin_page = page.get(f"/admin/reconcile/case/{stray_case.pk}/change/").content.decode()
    assert '<option value="approve">' in admin_page
    # A second request of it asks nothing more
    assert not case_act(case_id=stray_case.pk, action="refund", note="again", user=carol).acted
    assert CaseApproval.objects.count() == 1
    # alice cannot approve her own, nor carol without the permission
    with pytest.raises(CaseActionForbidden, match="second person"):
        case_act(case_id=stray_case.pk, action="approve", note="me", user=alice)
    with pytest.raises(CaseActionForbidden, match=r"reconcile\.approve_case"):
        case_act(case_id=stray_case.pk, action="approve", note="me", user=carol)
    assert not StrayCapture.objects.exists()

    # When bob approves it
    approved = case_act(case_id=stray_case.pk, action="approve", note="checked", user=bob)

    # Then it is carried out once, as alice's, with bob beside her
    assert approved.acted, approved.message
    assert StrayCapture.objects.get().refund_status == "SUCCEEDED"
    seen = wallet(user)
    assert seen["charged_total"] - seen["refunded_total"] == 0
    assert Case.objects.get().state == CaseState.RESOLVED
    assert actions(stray_case) == [
        ("refund", "alice", None),  # asked for
        ("refund", "alice", "bob"),  # carried out
        ("approve", "bob", None),
    ]
    # A second approval finds nothing left to approve
    assert not case_act(case_id=stray_case.pk, action="approve", note="again", user=bob).acted
    assert audit_run().findings == []


def test_an_accept_within_desk_approval_above_needs_no_second_person(unresolved_case, settings):
    case, payment = unresolved_case
    settings.DESK_APPROVAL_ABOVE = payment.amount  # "above" it: this one is not

    result = case_act(case_id=case.pk, action="accept", note="asked", user=desk_operator("accept"))

    assert result.acted, result.message
    assert Payment.objects.get(pk=payment.pk).status == "SUCCEEDED"
    assert not CaseApproval.objects.exists()


def test_the_command_line_asks_and_a_second_user_approves(stray_case):
    desk_operator(username="alice")
    desk_operator(username="bob")
    out = io.StringIO()

    call_command("cases", "refund", str(stray_case.pk), "--note", "x", "--by", "alice", stdout=out)
    call_command("cases", "approve", str(stray_case.pk), "--note", "y", "--by", "bob", stdout=out)

    assert "awaiting a second person's approval" in out.getvalue()
    assert StrayCapture.objects.get().refund_status == "SUCCEEDED"
    assert [a[1:] for a in actions(stray_case) if a[0] == "refund"][-1] == ("alice", "bob")


def test_the_command_line_refuses_a_user_the_shop_does_not_know(stray_case):
    with pytest.raises(CommandError, match="no active user 'mallory'"):
        call_command("cases", "resolve", str(stray_case.pk), "--note", "x", "--by", "mallory")

    assert Case.objects.get().state == CaseState.OPEN
    assert not CaseAction.objects.exists()


def test_the_command_line_exits_non_zero_for_an_unknown_user(stray_case, capsys):
    # As a shell runs it: the command's own error handling and exit status.
    from django.core.management import ManagementUtility

    command = ["manage.py", "cases", "resolve", str(stray_case.pk), "--note", "x"]
    with pytest.raises(SystemExit) as exit_:
        ManagementUtility([*command, "--by", "nobody"]).execute()

    assert exit_.value.code != 0
    assert "no active user 'nobody'" in capsys.readouterr().err


# --- Every action that moved money is recorded ------------------------------------------


def test_an_accept_is_recorded_when_another_persons_dismiss_closed_the_case_meanwhile(
    unresolved_case, monkeypatch, one_person_desk
):
    case, payment = unresolved_case
    alice, bob = desk_operator(username="alice"), desk_operator(username="bob")
    settle = payment_jobs.payment_reconcile

    def bob_dismisses_meanwhile(**kwargs: Any) -> Any:
        # The order is rolled forward by alice's accept; then, before her close, bob's
        # dismiss closes the case
        resolution = settle(**kwargs)
        assert case_act(case_id=case.pk, action="dismiss", note="looks done", user=bob).acted
        return resolution

    monkeypatch.setattr(payment_jobs, "payment_reconcile", bob_dismisses_meanwhile)

    result = case_act(case_id=case.pk, action="accept", note="the provider says paid", user=alice)

    # The money moved: the order is PAID through alice's accept, and her action is on
    # the record beside bob's dismiss, which keeps the case's resolution
    assert result.acted
    assert Order.objects.get(pk=payment.order_id).status == Order.Status.PAID
    assert Case.objects.get().resolution == "dismiss by bob: looks done"
    assert actions(case) == [("dismiss", "bob", None), ("accept", "alice", None)]
    accepted = CaseAction.objects.get(action="accept")
    assert "rolled_forward" in accepted.outcome
    assert "closed meanwhile (dismiss by bob: looks done)" in accepted.outcome
    fulfilment.run_once()
    assert audit_run().findings == []


def test_a_refund_is_recorded_when_the_machine_closed_the_case_meanwhile(
    stray_case, monkeypatch, one_person_desk
):
    alice = desk_operator(username="alice")
    take = strays.stray_capture_take

    def machine_settles_meanwhile(**kwargs: Any) -> Any:
        stray = take(**kwargs)
        # The statement job resolves the notification (the stray is booked), and the
        # open-cases job closes the case as settled by the machine
        ProviderNotification.objects.update(resolved_at=timezone.now(), resolution="booked")
        assert cases_run_once().closed == 1
        return stray

    monkeypatch.setattr(strays, "stray_capture_take", machine_settles_meanwhile)

    result = case_act(case_id=stray_case.pk, action="refund", note="not ours", user=alice)

    assert result.acted
    assert StrayCapture.objects.get().refund_status == "SUCCEEDED"
    (refund,) = CaseAction.objects.filter(action="refund")
    assert refund.by_name == "alice"
    assert "closed meanwhile (settled by the machine)" in refund.outcome
    assert audit_run().findings == []


# --- The provider cannot answer: a message, never a 500, recorded not at all -------------


def test_an_accept_while_the_provider_is_down_says_so_and_records_nothing(
    unresolved_case, gone_provider, settings, one_person_desk
):
    case, payment = unresolved_case
    settings.PROVIDER_BASE_URL = gone_provider
    columns = ("reconcile_attempts", "next_reconcile_at", "updated_at")
    before = list(Payment.objects.filter(pk=payment.pk).values(*columns))

    result = case_act(case_id=case.pk, action="accept", note="try", user=desk_operator())

    assert not result.acted
    assert "the provider did not answer" in result.message
    assert not CaseAction.objects.exists()
    assert Case.objects.get().state == CaseState.OPEN
    assert Payment.objects.get(pk=payment.pk).status == "UNKNOWN"
    # ... nor on the attempt: a click is not a reconciler's try (no backoff moved)
    assert list(Payment.objects.filter(pk=payment.pk).values(*columns)) == before


def test_the_admins_accept_while_the_provider_is_down_is_a_message_not_a_500(
    unresolved_case, gone_provider, settings, one_person_desk
):
    case, _ = unresolved_case
    settings.PROVIDER_BASE_URL = gone_provider
    page = Client(raise_request_exception=False)
    page.force_login(_superuser())

    answer = page.post(
        f"/admin/reconcile/case/{case.pk}/change/",
        {"action": "accept", "note": "try"},
        follow=True,
    )

    assert answer.status_code == 200
    assert "the provider did not answer" in answer.content.decode()
    assert not CaseAction.objects.exists()


def _superuser() -> Any:
    from tests.factories import UserFactory

    return UserFactory.create(is_staff=True, is_superuser=True)


def test_an_approval_while_the_provider_is_down_waits_again(stray_case, settings):
    alice, bob = desk_operator(username="alice"), desk_operator(username="bob")
    case_act(case_id=stray_case.pk, action="refund", note="not ours", user=alice)
    settings.PROVIDER_BASE_URL = "http://127.0.0.1:9/sandbox"  # nobody listens

    result = case_act(case_id=stray_case.pk, action="approve", note="ok", user=bob)

    assert not result.acted
    assert "the provider did not answer" in result.message
    assert CaseApproval.objects.get().state == CaseApproval.State.PENDING
    assert [a[0] for a in actions(stray_case)] == ["refund"]  # the request only


# --- A dismissed problem comes back -----------------------------------------------------


def test_a_dismissed_unresolved_attempt_is_a_new_case_case_after_s_later(unresolved_case, settings):
    case, payment = unresolved_case
    case_act(case_id=case.pk, action="dismiss", note="will look later", user=desk_operator())

    # Not again at once: the person has just looked
    assert cases_run_once().opened == 0

    # CASE_AFTER_S after the dismiss, still unresolved: a new case, the old one kept
    Case.objects.filter(pk=case.pk).update(
        resolved_at=timezone.now() - timedelta(seconds=settings.CASE_AFTER_S + 1)
    )
    assert cases_run_once().opened == 1
    old, new = Case.objects.order_by("pk")
    assert (old.state, old.resolution.endswith("will look later")) == (CaseState.RESOLVED, True)
    assert (new.state, new.kind, new.subject_id) == (
        CaseState.OPEN,
        CaseKind.UNRESOLVED,
        payment.pk,
    )
