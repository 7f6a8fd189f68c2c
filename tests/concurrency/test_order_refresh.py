"""Reading an order again (``refresh_from_db``) from many threads at once.

django-fsm-2's own refresh (its ``FSMModelMixin``) switches the protected
status field's ``protected`` flag off and back on around Django's refresh. The
field, and so the flag, is one object shared by every thread of the process: a
thread that finishes its refresh switches it on in the middle of another's,
which then fails with "Direct status modification is not allowed" (a 500 from a
refund under a threaded gunicorn, found by the refund benchmark).
``Order.refresh_from_db`` lets go of the instance's own status instead."""

import pytest

from orders.models import Order
from tests.concurrency.helpers import run_at_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

THREADS = 4
REFRESHES = 100


def test_orders_refreshed_in_many_threads_at_once_all_read_their_status(order):

    def refresh_many(_index: int) -> list[str]:
        errors = []
        for _ in range(REFRESHES):
            mine = Order.objects.get(pk=order.pk)
            try:
                mine.refresh_from_db()
                mine.refresh_from_db(fields=["refunded_amount"])
            except AttributeError as error:
                errors.append(str(error))
        return errors

    errors = [error for errors in run_at_once(THREADS, refresh_many) for error in errors]

    assert errors == []


def test_a_refreshed_order_still_refuses_a_direct_status_change(order):
    order.refresh_from_db()

    with pytest.raises(AttributeError, match="Direct status modification is not allowed"):
        order.status = Order.Status.PAID
    # and nothing was written
    assert Order.objects.get(pk=order.pk).status == Order.Status.UNPAID
