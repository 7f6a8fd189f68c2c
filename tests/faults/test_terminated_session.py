"""A database session the server ended while it sat idle is replaced, not a 500.

Found by the chaos run (docs/reliability.md): gunicorn's threads keep their
sessions for DATABASE_CONN_MAX_AGE, and a session PostgreSQL ended in the
meantime (a restart, a failover, an operator's pg_terminate_backend, an idle
timeout) failed the next request that picked it up with 500 `internal-error`.
"""

import psycopg
import pytest
from django.conf import settings
from django.db import close_old_connections, connection

from orders.models import Order
from tests.conftest import client_for, new_key
from tests.processes import child_database_url
from tools.bench.database import libpq_uri

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def persistent_sessions():
    # As deployed: the tests' harness keeps none (tests/conftest.py), and this
    # dictionary is the one it changed; the health check is left as configured.
    assert settings.DATABASE_CONN_MAX_AGE > 0
    connection.settings_dict["CONN_MAX_AGE"] = settings.DATABASE_CONN_MAX_AGE
    connection.close()  # the next session opens with these settings
    yield
    connection.settings_dict["CONN_MAX_AGE"] = 0
    connection.close()


def test_a_request_after_the_database_ended_an_idle_session_succeeds(user, persistent_sessions):
    api = client_for(user)
    assert api.get("/api/v1/orders/").status_code == 200
    assert connection.connection is not None  # kept for the next request
    backend = connection.connection.info.backend_pid

    with psycopg.connect(libpq_uri(child_database_url()), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [backend])

    # What the WSGI handler does at the start of every request (the test client
    # leaves it out): drop the connections that are too old or unusable.
    close_old_connections()
    response = api.get("/api/v1/orders/")

    assert response.status_code == 200, response.content
    assert connection.connection.info.backend_pid != backend


def test_a_session_the_server_ends_mid_request_answers_503_with_retry_after(user, product):
    # Given the database ends this request's session just as it inserts the order
    # (what the chaos run's terminate-backends does to a busy session)
    api = client_for(user)

    def end_session_before_insert(execute, sql, params, many, context):
        if sql.startswith('INSERT INTO "orders_order"'):
            backend = connection.connection.info.backend_pid
            with psycopg.connect(libpq_uri(child_database_url()), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [backend])
        return execute(sql, params, many, context)

    # When the customer orders
    try:
        with connection.execute_wrapper(end_session_before_insert):
            response = api.post(
                "/api/v1/orders/",
                {"lines": [{"sku": product.sku, "quantity": 1}]},
                format="json",
                headers={"Idempotency-Key": new_key()},
            )
    finally:
        connection.close()  # the ended session is of no further use

    # Then the answer is a 503 that says when to retry, never a 500
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "1"
    assert response.json()["code"] == "service-unavailable"
    assert "Idempotency-Key" in response.json()["detail"]
    # and nothing of the order was committed
    assert not Order.objects.exists()
