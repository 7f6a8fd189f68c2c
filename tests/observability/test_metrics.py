"""/metrics: who may read it, and that its numbers move as the shop works."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from operations.statements.passes import pass_run_once
from payments.models import Payment, Refund
from payments.providers import get_provider
from payments.providers.base import ProviderOutcomeUnknown
from tests.conftest import new_key
from tests.idempotency.test_behaviour_matrix import plant_locked_record
from tests.observability.conftest import METRICS_TOKEN, value

IDEMPOTENCY = "onceshop_idempotency_requests_total"


def test_metrics_are_closed_outside_the_demo_without_a_token(settings):
    settings.DEMO_MODE = False
    settings.METRICS_TOKEN = ""

    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ")

    assert response.status_code == 401
    assert response.json()["code"] == "metrics-unauthorized"
    assert response["WWW-Authenticate"] == "Bearer"


def test_metrics_need_the_configured_bearer_token(settings):
    settings.DEMO_MODE = False
    settings.METRICS_TOKEN = METRICS_TOKEN

    wrong = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token")
    right = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")

    assert wrong.status_code == 401
    assert right.status_code == 200
    assert right["Content-Type"].startswith("text/plain; version=0.0.4")


@pytest.mark.django_db
def test_metrics_are_open_in_demo_mode(settings):
    settings.DEMO_MODE = True
    settings.METRICS_TOKEN = ""

    assert Client().get("/metrics").status_code == 200


@pytest.mark.django_db
def test_requests_are_counted_by_route_name_never_by_raw_path(scrape, client, order):
    before = scrape()

    client.get(f"/api/v1/orders/{order.number}/")

    after = scrape()
    labels = {"route": "order-detail", "method": "GET", "status": "200"}
    name = "onceshop_http_requests_total"
    assert value(after, name, **labels) == value(before, name, **labels) + 1
    assert not any(order.number in str(labels) for _, labels in after)


@pytest.mark.django_db
def test_a_replay_counts_as_replayed_and_not_as_fresh(scrape, create_order):
    key = new_key()
    assert create_order(key).status_code == 201
    before = scrape()

    replay = create_order(key)

    after = scrape()
    assert replay["Idempotent-Replayed"] == "true"
    route = {"route": "order-list"}
    assert value(after, IDEMPOTENCY, outcome="replayed", **route) == (
        value(before, IDEMPOTENCY, outcome="replayed", **route) + 1
    )
    assert value(after, IDEMPOTENCY, outcome="fresh", **route) == value(
        before, IDEMPOTENCY, outcome="fresh", **route
    )


@pytest.mark.django_db
def test_a_key_reused_for_another_body_counts_as_mismatch(scrape, create_order):
    key = new_key()
    assert create_order(key).status_code == 201
    before = scrape()

    assert create_order(key, quantity=2).status_code == 422

    after = scrape()
    labels = {"route": "order-list", "outcome": "mismatch"}
    assert value(after, IDEMPOTENCY, **labels) == value(before, IDEMPOTENCY, **labels) + 1


@pytest.mark.django_db
def test_a_key_in_flight_counts_as_in_use_and_a_dead_ones_lock_as_a_takeover(
    scrape, create_order, user, product, settings
):
    live = plant_locked_record(user, product, locked_at=timezone.now())
    dead_at = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_LOCK_TIMEOUT + 1)
    dead = plant_locked_record(user, product, locked_at=dead_at)
    before = scrape()

    assert create_order(live).status_code == 409
    assert create_order(dead).status_code == 201

    after = scrape()
    in_use = {"route": "order-list", "outcome": "in_use"}
    assert value(after, IDEMPOTENCY, **in_use) == value(before, IDEMPOTENCY, **in_use) + 1
    takeovers = "onceshop_idempotency_lock_takeovers_total"
    assert value(after, takeovers) == value(before, takeovers) + 1


@pytest.mark.django_db(transaction=True)
def test_a_provider_timeout_is_unknown_and_unresolved_until_reconciled(
    scrape, pay, fault, settings
):
    # Given a provider that charges, then answers after our timeout
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", delay_s=1)
    before = scrape()

    # When the customer pays
    assert pay().status_code == 503

    # Then the outcome is unknown everywhere it is counted, and the payment unresolved
    during = scrape()
    pay_route = {"route": "order-pay"}
    assert value(during, IDEMPOTENCY, outcome="unknown", **pay_route) == (
        value(before, IDEMPOTENCY, outcome="unknown", **pay_route) + 1
    )
    calls = "onceshop_provider_calls_total"
    charge_unknown = {"operation": "charge", "outcome": "unknown"}
    assert value(during, calls, **charge_unknown) == value(before, calls, **charge_unknown) + 1
    assert value(during, "onceshop_payments_unresolved") == 1
    assert value(during, "onceshop_payments_unresolved_oldest_age_seconds") > 0

    # When a reconcile pass runs (the attempt is due at once)
    settings.RECONCILE_AFTER_S = 0
    pass_run_once()

    # Then the payment rolled forward and the gauge is back to zero
    after = scrape()
    assert Payment.objects.get().status == Payment.Status.SUCCEEDED
    assert value(after, "onceshop_payments_unresolved") == 0
    assert value(after, "onceshop_payments_unresolved_oldest_age_seconds") == 0
    items = "onceshop_reconcile_items_total"
    forward = {"job": "reconcile-payments", "result": "rolled_forward"}
    assert value(after, items, **forward) == value(before, items, **forward) + 1
    runs = "onceshop_reconcile_job_runs_total"
    ok = {"job": "reconcile-payments", "outcome": "ok"}
    assert value(after, runs, **ok) == value(before, runs, **ok) + 1
    last = "onceshop_reconcile_last_success_timestamp_seconds"
    assert value(after, last, job="reconcile-payments") > value(
        before, last, job="reconcile-payments"
    )


@pytest.mark.django_db(transaction=True)
def test_a_refund_timeout_is_an_unresolved_refund_until_reconciled(
    scrape, refund, fault, paid_order, settings
):
    # Given a provider that refunds, then answers after our timeout
    settings.PROVIDER_TIMEOUT_S = 0.5
    fault("timeout_after_commit", target="refund", delay_s=1)
    before = scrape()

    # When the customer asks for a refund
    assert refund().status_code == 503

    # Then the refund call is counted unknown and the refund is unresolved
    during = scrape()
    calls = "onceshop_provider_calls_total"
    refund_unknown = {"operation": "refund", "outcome": "unknown"}
    assert value(during, calls, **refund_unknown) == value(before, calls, **refund_unknown) + 1
    assert value(during, "onceshop_refunds_unresolved") == 1
    assert value(during, "onceshop_refunds_unresolved_oldest_age_seconds") > 0
    assert value(during, "onceshop_payments_unresolved") == 0  # the charge is settled

    # When a reconcile pass runs (the attempt is due at once)
    settings.RECONCILE_AFTER_S = 0
    pass_run_once()

    # Then the refund is settled and both refund gauges are back to zero
    after = scrape()
    assert Refund.objects.get().status == "SUCCEEDED"
    assert value(after, "onceshop_refunds_unresolved") == 0
    assert value(after, "onceshop_refunds_unresolved_oldest_age_seconds") == 0


@pytest.mark.django_db
def test_an_invented_http_method_does_not_make_a_new_series(scrape):
    Client().generic("BREW", "/api/v1/products/")

    methods = {dict(labels).get("method") for _, labels in scrape()}
    assert "BREW" not in methods
    assert "other" in methods


@pytest.mark.django_db(transaction=True)
def test_a_statement_download_is_counted_and_timed_as_a_provider_call(sandbox, scrape, settings):
    # Given the provider's statement of today, read whole, and then one that cannot
    # be fetched (nothing listens at the provider's address)
    calls = "onceshop_provider_calls_total"
    ok = {"operation": "statement", "outcome": "ok"}
    unknown = {"operation": "statement", "outcome": "unknown"}
    before = scrape()

    list(get_provider().statement(day=timezone.now().date()))
    settings.PROVIDER_BASE_URL = "http://127.0.0.1:9/sandbox"
    with pytest.raises(ProviderOutcomeUnknown):
        list(get_provider().statement(day=timezone.now().date()))

    # Then each download is one call with its outcome, timed once it ended
    after = scrape()
    assert value(after, calls, **ok) == value(before, calls, **ok) + 1
    assert value(after, calls, **unknown) == value(before, calls, **unknown) + 1
    count = "onceshop_provider_call_duration_seconds_count"
    assert value(after, count, operation="statement") == (
        value(before, count, operation="statement") + 2
    )
