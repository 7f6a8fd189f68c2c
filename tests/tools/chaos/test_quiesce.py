"""What the chaos run's quiesce waits for before it checks (tools/chaos/run.py).

The check reads the books once the background work has nothing left to do. A
provider that still has money to move (a late success, a reversal, a dispute
scheduled, its message maybe taken by a killed worker) or a notification the
shop has not settled is such work: without waiting for it, the money moves
after the check read the books, and a customer told 402 is found charged.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from callbacks.models import ProviderNotification
from demo.sandbox.models import Charge, Wallet
from reconcile.desk.services import notification_case_open
from tools.chaos.run import _unresolved, quiesce_commands

pytestmark = pytest.mark.django_db(transaction=True)


def _deferred(notify_id: str) -> ProviderNotification:
    return ProviderNotification.objects.create(
        notify_id=notify_id,
        trade_no=f"T-{notify_id}",
        out_trade_no=f"P-{notify_id}",
        trade_status="SUCCESS",
        amount=300,
        currency="CNY",
        outcome=ProviderNotification.Outcome.DEFERRED,
        reason="attempt is FAILED, provider says SUCCESS",
        response_status=200,
        response_body={},
    )


def test_a_late_success_the_provider_has_yet_to_make_keeps_the_run_busy():
    # Given a charge declined now whose success the sandbox has scheduled
    wallet = Wallet.objects.create(payer="chaos-03", balance=10_000)
    charge = Charge.objects.create(
        trade_no="T-LATE-1",
        out_trade_no="P-LATE-1",
        status=Charge.Status.DECLINED,
        decline_reason="pending",
        wallet=wallet,
        amount=300,
        currency="CNY",
        notify_url="http://127.0.0.1:9/callbacks/sandbox/",
        late_success_at=timezone.now() + timedelta(seconds=3),
    )

    # Then the run is not quiet
    assert _unresolved() == {"provider": 1}

    # until the move is made (its time cleared with it)
    Charge.objects.filter(pk=charge.pk).update(
        status=Charge.Status.SUCCESS,
        decline_reason=None,
        paid_at=timezone.now(),
        late_success_at=None,
    )
    assert _unresolved() == {}


def test_a_notification_the_shop_has_not_settled_keeps_the_run_busy_unless_a_case_holds_it():
    # Given a deferred notification nobody has settled
    _deferred("N-1")
    assert _unresolved() == {"notifications": 1}

    # When the reconciler hands it to a person (a case holds it), then it is theirs
    notification_case_open(
        notification=ProviderNotification.objects.get(notify_id="N-1"), why="contradicted"
    )
    assert _unresolved() == {}


def test_every_quiesce_pass_runs_the_providers_sweep_first_without_its_grace():
    first, *rest = quiesce_commands()

    assert first == ["sandbox_sweep", "--after-s", "0"]
    assert [command[0] for command in rest] == ["reconcile", "reconcile_statement"]
