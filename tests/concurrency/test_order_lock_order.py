"""The order row is every writer's first lock (``orders.locks``): a cancel and a
payment's settlement on one order queue on it, never deadlock, and one wins.

The settlement is the provider's late capture of a declined attempt (the
sandbox's ``late_success``, carried out by the test at the provider), the one
case where a cancel and a settlement can both apply to an UNPAID order with
nothing live: whichever locks the order first decides, and the other sees its
committed result. The race is set up exactly: the first writer pauses right
after its order lock, the second is seen waiting on a lock, then the first goes on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections

from orders.errors import OrderNotCancellable
from orders.models import Order
from orders.services import order_cancel
from payments.models import LedgerEntry, Payment, Refund
from payments.orphans import OrphanOutcome, capture_orphan_resolve
from payments.providers import get_provider
from payments.services import order_cancel_blocker
from tests.concurrency.helpers import backend_pid, wait_until_waiting_on_a_lock
from tests.payments.test_pay_late_outcomes import declined_now_paid_later

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def pause_after_the_order_lock(paused: threading.Event, resume: threading.Event) -> Any:
    """An execute wrapper: after this connection's first ``orders_order ... FOR UPDATE``,
    say so and wait (inside the writer's transaction, the lock held)."""

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if 'FROM "orders_order"' in sql and "FOR UPDATE" in sql and not paused.is_set():
            paused.set()
            assert resume.wait(10)
        return result

    return wrapper


@pytest.mark.parametrize("first", ["cancel", "settle"])
def test_a_cancel_and_a_late_capture_on_one_order_never_deadlock_and_one_wins(
    first, pay, fault, order, user, wallet
):
    # Given an attempt declined now and captured later at the provider: the order is
    # UNPAID with nothing live, so a cancel and the capture's settlement both apply
    declined = declined_now_paid_later(pay, fault)
    capture = get_provider().query(out_trade_no=declined.out_trade_no)
    assert capture is not None
    outcome: dict[str, Any] = {}

    def cancel() -> None:
        try:
            outcome["cancel"] = order_cancel(
                order=Order.objects.get(pk=order.pk), blocker=order_cancel_blocker
            ).status
        except OrderNotCancellable as refused:
            outcome["cancel"] = refused

    def settle() -> None:
        outcome["settle"] = capture_orphan_resolve(payment_id=declined.pk, capture=capture)

    writers: dict[str, Callable[[], None]] = {"cancel": cancel, "settle": settle}
    paused, resume, second_ready = threading.Event(), threading.Event(), threading.Event()
    second_pid: list[int] = []
    errors: list[BaseException] = []

    def run_first() -> None:
        try:
            with connection.execute_wrapper(pause_after_the_order_lock(paused, resume)):
                writers[first]()
        except BaseException as error:  # a deadlock victim among them
            errors.append(error)
        finally:
            connections.close_all()

    def run_second() -> None:
        try:
            second_pid.append(backend_pid())
            second_ready.set()
            writers["settle" if first == "cancel" else "cancel"]()
        except BaseException as error:
            errors.append(error)
        finally:
            connections.close_all()

    connection.close()
    one, two = threading.Thread(target=run_first), threading.Thread(target=run_second)
    try:
        # When the first writer holds the order's lock, and the second waits on a lock
        one.start()
        assert paused.wait(10)
        two.start()
        assert second_ready.wait(10)
        wait_until_waiting_on_a_lock(second_pid[0])
    finally:
        # then the first goes on
        resume.set()
        one.join(30)
        two.join(30)

    # Then neither was aborted, and the first decided
    assert errors == []
    order.refresh_from_db()
    payment = Payment.objects.get(pk=declined.pk)
    if first == "cancel":
        # cancelled; the capture came too late for it: booked apart and refunded
        assert outcome["cancel"] == Order.Status.CANCELLED
        assert outcome["settle"] is OrphanOutcome.ORPHANED
        assert (order.status, payment.status) == (Order.Status.CANCELLED, "ORPHANED")
        assert LedgerEntry.objects.get().kind == "orphan_capture"
        assert Refund.objects.get(payment=payment, order__isnull=True).reason == (
            "orphaned-capture"
        )
    else:
        # paid through the late capture; the cancel saw it paid and was refused
        assert outcome["settle"] is OrphanOutcome.ROLLED_FORWARD
        assert isinstance(outcome["cancel"], OrderNotCancellable)
        assert (order.status, payment.status) == (Order.Status.PAID, "SUCCEEDED")
        assert LedgerEntry.objects.get().kind == "capture"
        assert not Refund.objects.exists()
    assert wallet(user)["charged_total"] == order.amount
