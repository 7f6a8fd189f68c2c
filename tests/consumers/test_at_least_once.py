"""At-least-once consumers with a real Celery worker against Redis (not eager mode).

Each scenario ends with one payment, one ledger entry and one shipment, however
often the worker runs a task or the provider repeats a notification.
"""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from callbacks.models import ProviderNotification
from orders.models import Order, Shipment
from orders.tasks import fulfil_order
from payments.models import LedgerEntry, Payment
from tests.assertions import assert_paid_once
from tests.conftest import new_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def assert_one_of_everything(order: Order, user: Any, wallet: Any) -> None:
    assert_paid_once(order, user, wallet)
    assert Payment.objects.filter(order=order).count() == 1
    assert LedgerEntry.objects.filter(order=order).count() == 1
    assert Shipment.objects.filter(order=order).count() == 1


def test_a_task_executed_twice_ships_once(worker, pay, order, user, wallet):
    assert pay().status_code == 200
    worker.wait_for(worker.idle, what="the first fulfilment")

    fulfil_order.delay(order.pk)  # a redelivered message, or a doubled enqueue
    fulfil_order.delay(order.pk)
    worker.wait_for(worker.idle, what="both extra runs")

    assert_one_of_everything(order, user, wallet)


@pytest.mark.parametrize("mode", ["callback_duplicates", "callback_shuffle"])
def test_duplicated_notifications_settle_once_whoever_comes_first(
    worker, pay, fault, order, user, wallet, settings, mode
):
    # Given a charge the provider makes but answers too late, notified 3 times
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", delay_s=1)
    fault(mode, copies=3)
    key = new_key()
    assert pay(key).status_code == 503

    # When the worker delivers the notifications (first one settles, the rest replay)
    worker.wait_for(lambda: Shipment.objects.filter(order=order).exists(), what="shipment")
    worker.wait_for(worker.idle, what="every copy delivered")

    # Then the client's retry with the same key finds it paid
    assert pay(key).status_code == 200
    assert_one_of_everything(order, user, wallet)
    row = ProviderNotification.objects.get()  # three copies, one notify_id, one row
    assert row.outcome == "applied"


def test_a_dropped_notification_changes_nothing(worker, pay, fault, order, user, wallet):
    fault("callback_drop")

    assert pay().status_code == 200
    worker.wait_for(lambda: Shipment.objects.filter(order=order).exists(), what="shipment")
    worker.wait_for(worker.idle, what="the queue to drain")

    assert_one_of_everything(order, user, wallet)
    assert ProviderNotification.objects.count() == 0


class _Gate(BaseHTTPRequestHandler):
    """Stands between the provider's worker and the shop: holds the first delivery
    open (so the worker is mid-task), then forwards every later one to the shop."""

    shop_url = ""
    arrived = threading.Event()
    deliveries = 0

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).deliveries += 1
        if type(self).deliveries == 1:
            type(self).arrived.set()
            threading.Event().wait(15)  # until the worker holding this call is killed
            return
        answer = requests.post(
            self.shop_url + self.path,
            data=body,
            timeout=10,
            headers={
                "Content-Type": "application/json",
                "Sandbox-Signature": self.headers["Sandbox-Signature"],
            },
        )
        self.send_response(answer.status_code)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    def log_message(self, *args: object) -> None:
        pass


def test_a_worker_killed_mid_task_redelivers_and_changes_nothing(
    worker, pay, order, user, wallet, settings, live_server
):
    gate = ThreadingHTTPServer(("127.0.0.1", 0), _Gate)
    _Gate.shop_url, _Gate.deliveries = live_server.url, 0
    _Gate.arrived.clear()
    threading.Thread(target=gate.serve_forever, daemon=True).start()
    settings.SHOP_BASE_URL = f"http://127.0.0.1:{gate.server_port}"  # the notify_url
    try:
        # Given a paid order whose notification the worker is delivering right now
        assert pay().status_code == 200
        assert _Gate.arrived.wait(30), "the notification never reached the gate"

        # When the worker's process dies mid-task (acks_late: the message is not acked)
        (child,) = worker.pool_children()
        child.kill()

        # Then the message is redelivered to a new process, which delivers it again
        worker.wait_for(lambda: _Gate.deliveries >= 2, what="the redelivery")
        worker.wait_for(worker.idle, what="the queue to drain")
    finally:
        gate.shutdown()
        gate.server_close()

    assert any("SIGKILL" in line or "WorkerLostError" in line for line in worker.log)
    assert_one_of_everything(order, user, wallet)
    assert ProviderNotification.objects.get().outcome == "duplicate"  # the sync answer won
