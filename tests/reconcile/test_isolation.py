"""Every batch job runs each item in the one failure isolation: a poisoned item — a real
fault in the database (a trigger refusing the item's write) or a row whose data
makes the handler raise — is counted, backed off and, after CASE_AFTER_FAILURES,
a case, while every other item of the pass settles."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.utils import timezone

from orders.models import Order, Shipment
from reconcile.desk.models import Case, ItemFailure
from reconcile.recovery import expiry, fulfilment
from tests.reconcile.test_expiry import make_order, releases

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_expiry_pass_with_one_order_that_cannot_be_cancelled_expires_the_others(
    user, product, poison: Callable[..., None], settings
):
    settings.CASE_AFTER_FAILURES = 2
    settings.RECONCILE_BACKOFF_BASE_S = 0  # due again at once: two passes, two tries
    orders = [
        make_order(user, product, quantity=1, age_s=settings.ORDER_TTL_S + 1) for _ in range(3)
    ]
    # The middle order's row refuses its cancel (as a broken trigger or constraint would)
    poison("orders_order", f"NEW.id = {orders[1].pk} AND NEW.status <> OLD.status")

    first = expiry.run_once()

    assert (first.expired, first.failed) == (2, 1)
    statuses = [Order.objects.get(pk=o.pk).status for o in orders]
    assert statuses == ["CANCELLED", "UNPAID", "CANCELLED"]
    assert [releases(o) for o in orders] == [1, 0, 1]  # the failed one gave nothing back
    failure = ItemFailure.objects.get()
    assert (failure.job, failure.key, failure.reference) == (
        "expiry",
        str(orders[1].pk),
        orders[1].number,
    )

    # And the second failure in a row is a case about the order
    assert expiry.run_once().failed == 1
    case = Case.objects.get()
    assert (case.kind, case.subject_type, case.subject_id) == ("item-failed", "order", orders[1].pk)


def test_a_fulfil_sweep_with_one_order_that_cannot_be_shipped_ships_the_others(
    user, product, poison: Callable[..., None], due_at_once
):
    # Given three PAID orders whose fulfil messages were lost
    orders = [make_order(user, product, quantity=1) for _ in range(3)]
    Order.objects.filter(pk__in=[o.pk for o in orders]).update(
        status=Order.Status.PAID, paid_at=timezone.now()
    )
    # ... and the first one's shipment row is refused
    poison("orders_shipment", f"NEW.order_id = {orders[0].pk}", event="INSERT")

    counts = fulfilment.run_once()

    assert (counts.examined, counts.shipped, counts.failed) == (3, 2, 1)
    assert set(Shipment.objects.values_list("order_id", flat=True)) == {
        orders[1].pk,
        orders[2].pk,
    }
    failure = ItemFailure.objects.get()
    assert (failure.job, failure.key, failure.reference) == (
        "fulfilment",
        str(orders[0].pk),
        orders[0].number,
    )
    # And it backs off: the next sweep leaves it alone
    assert fulfilment.run_once().examined == 0
