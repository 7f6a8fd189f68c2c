"""Scenarios on a real primary and its lagging replica (run by test_replica_reads.py).

Not collected by the main session (the name does not start with ``test_``): it
needs DATABASE_URL on a primary and DATABASE_REPLICA_URL on its standby.
Lag is injected with ``recovery_min_apply_delay``: the standby receives every
commit at once but applies it only after the delay, so a row just committed on
the primary is not on the replica yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from config.dbrouter import REPLICA
from demo.cluster.postgres import Pair, Server
from orders.models import Order
from tests.conftest import client_for, new_key
from tests.factories import ProductFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", REPLICA])

# Far longer than the requests below take: the replica is certainly behind for them.
LAG_MS = 30_000


def _pair() -> Pair:
    # The servers as the test reaches them (their processes are the outer test's).
    def server(alias: str) -> Server:
        port = int(connections[alias].settings_dict["PORT"])
        return Server(alias, data_dir=Path("/nonexistent") / alias, port=port)

    return Pair(server("default"), server(REPLICA))


@pytest.fixture
def lagging_replica() -> Iterator[Pair]:
    pair = _pair()
    pair.wait_caught_up()  # what the test set up before the lag is on the replica
    pair.set_apply_delay(LAG_MS)
    try:
        yield pair
    finally:
        pair.set_apply_delay(0)
        pair.wait_caught_up(timeout_s=LAG_MS / 1000 + 30)


@pytest.fixture
def replica_queries() -> Iterator[list[str]]:
    """Every statement sent to the replica alias while the test runs."""
    seen: list[str] = []

    def record(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        seen.append(sql)
        return execute(sql, *args)

    with connections[REPLICA].execute_wrapper(record):
        yield seen


def test_the_pair_really_lags():
    pair = _pair()
    assert pair.replica.sql("SELECT pg_is_in_recovery()")[0][0] is True
    assert (
        connections[REPLICA].settings_dict["NAME"] == connections["default"].settings_dict["NAME"]
    )


def test_a_replay_and_a_key_mismatch_read_the_primary_while_the_list_is_stale(
    lagging_replica, replica_queries
):
    # Given a customer and a product (on the primary; the replica lags behind)
    user = UserFactory.create()
    product = ProductFactory.create(stock=10)
    api = client_for(user)
    body = {"lines": [{"sku": product.sku, "quantity": 1}]}
    key = new_key()

    # When the order is created and the same request is sent again at once
    first = api.post("/api/v1/orders/", body, format="json", headers={"Idempotency-Key": key})
    again = api.post("/api/v1/orders/", body, format="json", headers={"Idempotency-Key": key})
    other = api.post(
        "/api/v1/orders/",
        {"lines": [{"sku": product.sku, "quantity": 2}]},
        format="json",
        headers={"Idempotency-Key": key},
    )

    # Then the retry is a replay of the first answer, found on the primary...
    assert first.status_code == 201
    assert again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["number"] == first.json()["number"]
    # ...a different body under the same key is caught (the key was looked up there)...
    assert other.status_code == 422
    assert other.json()["code"] == "idempotency-key-mismatch"
    # ...and nothing of the write path, the replay or the key lookup asked the replica.
    assert replica_queries == []
    assert Order.objects.filter(user=user).count() == 1

    # While the list, which may be stale, reads the replica: the order is not there yet
    # (who asks is read from the primary: the customer, too, is new).
    listed = api.get("/api/v1/orders/")
    assert listed.status_code == 200
    assert listed.json()["count"] == 0
    assert any("orders_order" in sql for sql in replica_queries)

    # Once the replica has applied the commit, the list shows the order.
    lagging_replica.set_apply_delay(0)
    lagging_replica.wait_caught_up()
    assert api.get("/api/v1/orders/").json()["count"] == 1
