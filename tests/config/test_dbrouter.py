"""The router: a stale read whose replica cannot be reached is served by the primary."""

import socket

import pytest
from django.conf import settings
from django.db import connections

from config.dbrouter import REPLICA


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens once the probe is closed


@pytest.fixture(scope="module")
def unreachable_replica(django_db_setup, django_db_blocker):
    """A ``replica`` alias whose server is down (as while a standby restarts). Added once
    the test databases exist, and before a test's own set-up, which admits only the
    aliases it knows."""
    primary = connections.settings["default"]
    entry = {**primary, "HOST": "127.0.0.1", "PORT": _closed_port()}
    # A mirror of the primary (as config/databases.py declares it): the test's
    # teardown flushes the primary only, never the unreachable server.
    entry["TEST"] = {**primary["TEST"], "MIRROR": "default"}
    databases = settings.DATABASES
    settings.DATABASES = {**databases, REPLICA: entry}
    connections.settings[REPLICA] = entry
    yield
    connections[REPLICA].close()
    del connections[REPLICA]
    del connections.settings[REPLICA]
    settings.DATABASES = databases


# Outside an atomic block, as a request is (inside one the router keeps to the primary).
@pytest.mark.django_db(transaction=True, databases=["default", REPLICA])
@pytest.mark.usefixtures("unreachable_replica")
def test_the_order_list_answers_from_the_primary_while_the_replica_is_down(client, order):
    # when: a page the router sends to the replica, with the replica unreachable
    response = client.get("/api/v1/orders/")

    # then: the primary's answer, not an error
    assert response.status_code == 200, response.content
    assert [row["number"] for row in response.json()["results"]] == [order.number]
    assert REPLICA in settings.DATABASES
