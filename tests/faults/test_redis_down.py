"""Redis down (docs/design.md, "Redis down"): never a 500, each use doing what the contract says.

Throttles and quotas fail open and are counted; the checkout, which cannot work
without its one-time tokens, answers 503 ``service-unavailable`` with
``Retry-After``; the reconciler runs its pass on its row claims alone. The Redis
is the test's own (tests/redis_servers.py), really stopped or really frozen.
"""

from __future__ import annotations

import time

import pytest
import redis
from django.test import Client
from rest_framework.test import APIRequestFactory

from config.celery import app as celery_app
from demo.sandbox.models import Charge, Notification
from demo.sandbox.services.sweeps import sandbox_sweep_run_once
from edge.errors import PROBLEM_CONTENT_TYPE, InternalError
from edge.handler import exception_handler
from edge.redis import REDIS_TIMEOUT_S
from operations.statements.passes import JOBS, pass_run_once
from orders.models import Order
from tests.conftest import client_for, new_key
from tests.demo.sandbox.conftest import CHARGES, NOTIFY_ORIGIN, charge_body, merchant_client
from tests.factories import DEFAULT_PASSWORD
from tests.redis_servers import unavailable

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_api_lets_requests_through_unthrottled_and_counts_them(redis_stopped, user, product):
    # Given a stopped Redis (the user throttle and the per-user key quota live there)
    api = client_for(user)
    before = unavailable("rate-limit")

    # When the customer reads the catalogue and orders
    listed = api.get("/api/v1/products/")
    created = api.post(
        "/api/v1/orders/",
        {"lines": [{"sku": product.sku, "quantity": 1}]},
        format="json",
        headers={"Idempotency-Key": new_key()},
    )

    # Then both are answered as if nothing were wrong, and each unchecked limit counted
    assert listed.status_code == 200, listed.content
    assert created.status_code == 201, created.content
    assert Order.objects.filter(user=user).count() == 1
    # the throttle on each request, and the key quota on the POST
    assert unavailable("rate-limit") - before == 3


def test_logins_and_the_token_endpoint_work_unthrottled(redis_stopped, user):
    token = Client().post(
        "/api/v1/auth/token/", {"username": user.username, "password": DEFAULT_PASSWORD}
    )
    page = Client().post("/login/", {"username": user.username, "password": DEFAULT_PASSWORD})

    assert token.status_code == 200, token.content
    assert token.json()["token"] == user.auth_token.key
    assert page.status_code == 302, page.content  # logged in, sent on


def test_the_callback_endpoint_checks_the_notification_not_the_rate(redis_stopped):
    before = unavailable("rate-limit")

    response = Client().post("/api/v1/callbacks/sandbox/", b"{}", content_type="application/json")

    # An unsigned body is refused for what it is, not answered 500
    assert 400 <= response.status_code < 500, response.content
    assert unavailable("rate-limit") > before


def test_a_frozen_redis_costs_a_request_its_short_timeout_not_a_hang(redis_server, user):
    # A frozen Redis accepts the connection and never answers: the timeout decides
    api = client_for(user)
    assert api.get("/api/v1/products/").status_code == 200  # a pooled connection now
    redis_server.freeze()
    try:
        started = time.monotonic()
        response = api.get("/api/v1/products/")
        elapsed = time.monotonic() - started
    finally:
        redis_server.thaw()

    assert response.status_code == 200, response.content
    assert elapsed < 3 * REDIS_TIMEOUT_S, elapsed


def test_the_checkout_page_answers_503_with_retry_after(redis_stopped, user, product):
    web = Client()
    web.force_login(user)
    before = unavailable("checkout-token")

    # The catalogue cannot issue the form's one-time token
    page = web.get("/")
    # A form shown before the outage cannot have its token checked
    form = {"checkout_token": "t" * 43, f"qty-{product.sku}": "1"}
    submitted = web.post("/checkout/", form)
    # A script that asks for JSON gets the problem itself
    as_json = web.post("/checkout/", form, HTTP_ACCEPT="application/json")

    for response in (page, submitted):
        assert response.status_code == 503, response.content
        assert response["Retry-After"] == "5"
        assert response["Content-Type"].startswith("text/html")
    assert as_json.status_code == 503
    assert as_json["Content-Type"] == PROBLEM_CONTENT_TYPE
    assert as_json["Retry-After"] == "5"
    assert as_json.json()["code"] == "service-unavailable"
    assert as_json.json()["type"] == "/problems/service-unavailable"
    assert not Order.objects.exists()
    assert unavailable("checkout-token") - before == 3


def test_the_problem_catalogue_describes_service_unavailable():
    page = Client().get("/problems/service-unavailable")

    assert page.status_code == 200
    assert "Service unavailable" in page.content.decode()


def test_a_reconcile_pass_runs_on_its_row_claims_without_the_lock(redis_stopped):
    before = unavailable("runner-lock")

    counts = pass_run_once()

    # Every job ran (None would mean "skipped: another runner held the lock")
    assert all(counts[job.name] is not None for job in JOBS), counts
    assert unavailable("runner-lock") - before == len(JOBS)


def test_a_500_tells_only_a_request_with_a_key_to_retry_with_it():
    factory = APIRequestFactory()
    keyed = factory.post("/api/v1/orders/", {}, format="json", HTTP_IDEMPOTENCY_KEY=new_key())
    unkeyed_post = factory.post("/api/v1/auth/token/", {}, format="json")
    read = factory.get("/api/v1/orders/", HTTP_IDEMPOTENCY_KEY=new_key())

    def detail(request) -> str:
        response = exception_handler(RuntimeError("boom"), {"request": request})
        assert response.status_code == 500
        return str(response.data["detail"])

    assert detail(keyed) == InternalError.keyed_detail
    for request in (unkeyed_post, read):
        assert "Idempotency-Key" not in detail(request)
        assert detail(request) == InternalError.default_detail


def test_what_a_stopped_broker_lost_at_commit_the_sandbox_sweep_sees_done(
    redis_server, settings, staff
):
    # Given the provider's broker stopped while it settles a charge and declines one
    # under late_success: both enqueues at commit are lost, the rows stay as committed
    settings.SANDBOX_NOTIFY_URLS = [NOTIFY_ORIGIN]
    arm = staff.post("/sandbox/v1/faults", {"mode": "late_success", "delay_s": 0}, format="json")
    assert arm.status_code == 201, arm.content
    redis_server.stop()
    merchant = merchant_client()
    declined = merchant.post(
        CHARGES, charge_body(), format="json", headers={"Idempotency-Key": new_key()}
    )
    paid = merchant.post(
        CHARGES, charge_body(), format="json", headers={"Idempotency-Key": new_key()}
    )
    assert (declined.json()["status"], paid.json()["status"]) == ("DECLINED", "SUCCESS")
    never_tried = Notification.objects.filter(status=Notification.Status.PENDING, attempts=0)
    assert never_tried.count() == 2  # the decline's and the success's

    # When the broker is back and the sweep runs, its grace period over
    redis_server.start()
    fresh = sandbox_sweep_run_once()  # within the grace period: nothing is touched
    counts = sandbox_sweep_run_once(after_s=0)

    # Then the late success happened after all, and every lost notification is queued
    assert (fresh.notifications_enqueued, fresh.late_charges_settled) == (0, 0)
    assert counts.late_charges_settled == 1
    assert counts.notifications_enqueued == 2
    late = Charge.objects.get(out_trade_no=declined.json()["out_trade_no"])
    assert late.status == Charge.Status.SUCCESS
    queued = redis.Redis.from_url(redis_server.url).llen(celery_app.conf.task_default_queue)
    assert queued == 3  # the two lost ones, and the late success's own notification


@pytest.mark.timeout(120)
def test_a_frozen_broker_costs_a_pay_its_timeouts_not_a_hang(redis_server, pay, order, settings):
    # Given a Redis (the broker too) that accepts connections and never answers; the
    # sandbox provider shares it here, so the shop waits for its slower answer
    settings.PROVIDER_TIMEOUT_S = 30
    redis_server.freeze()
    try:
        started = time.monotonic()
        # When the customer pays: the provider's notifications and our fulfil task are
        # enqueued at commit, each meeting the frozen broker
        response = pay()
        elapsed = time.monotonic() - started
    finally:
        redis_server.thaw()

    # Then the committed payment is the answer, within the timeouts, not a hang
    assert response.status_code == 200, response.content
    assert Order.objects.get(pk=order.pk).status == "PAID"
    assert elapsed < 20, elapsed
