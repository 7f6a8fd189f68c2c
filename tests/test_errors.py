"""Database contention never leaks as a raw 500: a lock timeout is 503, an aborted
transaction (serialization failure, deadlock) is 409, both safe to retry."""

import psycopg
import pytest
from django.db import InternalError, OperationalError, connection
from psycopg import errors as pg_errors

from edge.errors import ConcurrentUpdate, DatabaseSessionLost, LockTimeout
from edge.handler import as_application_error
from idempotency.models import IdempotencyKey
from orders.models import Order
from tests.conftest import new_key
from tests.processes import child_database_url


def wrapped(cause: Exception) -> OperationalError:
    """How Django hands a driver error up: its own class, the driver's as the cause."""
    error = OperationalError(str(cause))
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("cause", "expected", "status"),
    [
        (pg_errors.LockNotAvailable("lock timeout"), LockTimeout, 503),
        (pg_errors.SerializationFailure("could not serialize"), ConcurrentUpdate, 409),
        (pg_errors.DeadlockDetected("deadlock detected"), ConcurrentUpdate, 409),
    ],
)
def test_contention_errors_map_to_retryable_answers(cause, expected, status):
    error = as_application_error(wrapped(cause))

    assert isinstance(error, expected)
    assert error.status == status
    assert error.headers["Retry-After"] == "1"


def test_a_session_ended_under_pgbouncer_is_503_session_lost_not_500():
    # What psycopg raised through PgBouncer right after pg_terminate_backend ended the
    # server session the pooler had given this client (the cluster's chaos run).
    cause = psycopg.InternalError("received 2 results from command 'BEGIN'")
    error = InternalError(str(cause))
    error.__cause__ = cause

    mapped = as_application_error(error)

    assert isinstance(mapped, DatabaseSessionLost)
    assert mapped.status == 503
    assert mapped.headers["Retry-After"] == "1"


@pytest.mark.parametrize(
    "cause",
    [
        # PgBouncer's words when the server connection under a client breaks (the
        # cluster's chaos run met both, right after `pg_terminate_backend`).
        pg_errors.ProtocolViolation("server conn crashed?"),
        pg_errors.ProtocolViolation("invalid server parameter"),
        pg_errors.ConnectionFailure("connection to server lost"),
    ],
)
def test_a_connection_exception_is_503_session_lost_not_500(cause):
    mapped = as_application_error(wrapped(cause))

    assert isinstance(mapped, DatabaseSessionLost)
    assert mapped.status == 503
    assert mapped.headers["Retry-After"] == "1"


@pytest.mark.django_db(transaction=True)
def test_a_row_lock_held_too_long_is_503_lock_timeout_and_nothing_is_stored(create_order, product):
    # Given another transaction holding the product's row lock
    holder = psycopg.connect(child_database_url())
    holder.execute("SELECT 1 FROM orders_product WHERE id = %s FOR UPDATE", [product.pk])
    key = new_key()
    try:
        # When an order needs that row, with a short lock timeout on our connection
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        blocked = create_order(key=key)
    finally:
        holder.rollback()
        holder.close()

    # Then a clear, retryable 503, and the whole phase (key included) rolled back
    assert blocked.status_code == 503
    assert blocked["Content-Type"] == "application/problem+json"
    assert blocked.json()["code"] == "lock-timeout"
    assert blocked["Retry-After"] == "1"
    assert not IdempotencyKey.objects.filter(key=key).exists()
    assert Order.objects.count() == 0
    # And the same key succeeds once the lock is gone
    assert create_order(key=key).status_code == 201
