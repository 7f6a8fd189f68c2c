"""The fulfil sweep: a PAID order whose fulfil message was lost gets its one shipment."""

from __future__ import annotations

import pytest

from orders.models import Shipment
from orders.tasks import fulfil_order
from reconcile.recovery import fulfilment

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_paid_order_without_a_shipment_gets_one_once(pay, order, settings):
    # The fulfil task went to the test queue and no worker ran it: a lost message.
    assert pay().status_code == 200
    assert not Shipment.objects.exists()
    settings.FULFIL_SWEEP_AFTER_S = 0

    first = fulfilment.run_once()
    second = fulfilment.run_once()

    assert (first.examined, first.shipped) == (1, 1)
    assert second.examined == 0
    assert Shipment.objects.get().order_id == order.pk


def test_the_sweep_leaves_recent_orders_to_the_task_and_a_late_task_adds_nothing(
    pay, order, settings
):
    assert pay().status_code == 200

    assert fulfilment.run_once().examined == 0  # within FULFIL_SWEEP_AFTER_S
    settings.FULFIL_SWEEP_AFTER_S = 0
    assert fulfilment.run_once().shipped == 1
    assert fulfil_order(order.pk) is True  # the redelivered message, late: a no-op
    assert Shipment.objects.count() == 1


def test_unpaid_orders_are_not_shipped(order, settings):
    settings.FULFIL_SWEEP_AFTER_S = 0

    assert fulfilment.run_once().examined == 0
    assert not Shipment.objects.exists()
