"""The broker failing after COMMIT never turns a committed success into an error.

Enqueues run in ``transaction.on_commit(..., robust=True)``: by then the rows
are committed and the answer is true, so a broker that refuses the message is
logged and left to the safety net (the fulfil sweep ships the order; the
shop's reconciler, not the notification, settles an attempt nobody told it
about). The broker is really unreachable here: Celery's producer points at a
closed port, nothing is mocked.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest

from config.celery import app as celery_app
from demo.sandbox.models import Notification
from orders.models import Order, Shipment
from reconcile.recovery import fulfilment
from tests.assertions import assert_paid_once
from tests.conftest import new_key

pytestmark = pytest.mark.django_db(transaction=True)


def _drop_producer_pool() -> None:
    # Celery caches its connection pool and producers; the next send looks them
    # up again for ``broker_url`` (what Celery itself does after a fork). Kombu
    # keeps one pool per broker URL, so the real broker's pool is found again.
    celery_app._pool = None  # type: ignore[attr-defined]
    celery_app.amqp._producer_pool = None  # type: ignore[attr-defined]


@pytest.fixture
def broker_down() -> Iterator[None]:
    """Every task sent while this is active meets a broker nobody listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    original = celery_app.conf.broker_url
    celery_app.conf.update(broker_url=f"redis://127.0.0.1:{port}/0")
    _drop_producer_pool()
    try:
        yield
    finally:
        celery_app.conf.update(broker_url=original)
        _drop_producer_pool()


def test_a_pay_committed_while_the_broker_is_down_still_answers_200(
    broker_down, pay, order, user, wallet, settings, caplog
):
    # Given a broker that refuses every message (the provider's notification and
    # our fulfil task are both enqueued after their transactions commit)
    caplog.set_level(logging.ERROR, logger="django.db.backends.base")

    # When the customer pays
    response = pay(new_key())

    # Then the committed charge and settlement are the answer, not a 500 or a 503
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "PAID"
    assert_paid_once(order, user, wallet)
    # and each lost enqueue was logged (the provider's and ours)
    failures = [r for r in caplog.records if "on_commit" in r.getMessage()]
    assert {r.levelno for r in failures} == {logging.ERROR}
    assert any("notification" in r.getMessage() for r in failures)
    assert any("fulfil" in r.getMessage() for r in failures)
    # The provider's notification rows committed with its charge, undelivered
    pending = (Notification.Status.PENDING, 0)
    assert set(Notification.objects.values_list("status", "attempts")) == {pending}
    # and no shipment yet: the message was lost
    assert not Shipment.objects.filter(order=order).exists()

    # When the fulfil sweep runs (its grace period over)
    settings.FULFIL_SWEEP_AFTER_S = 0
    counts = fulfilment.run_once()

    # Then the order it missed is shipped, once
    assert (counts.examined, counts.shipped) == (1, 1)
    assert Shipment.objects.filter(order=order).count() == 1
    assert Order.objects.get(pk=order.pk).status == "PAID"
