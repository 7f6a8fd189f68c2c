"""What breaks under PgBouncer's transaction pooling, and the settings that avoid it.

Each test runs through a real PgBouncer (tests/cluster/conftest.py). Each shows
first what goes wrong with the settings of a direct connection, then that the
settings ``DATABASE_TRANSACTION_POOLING=true`` gives (config/databases.py) work.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import DatabaseError, OperationalError, connection, transaction
from django.db.backends.postgresql.base import DatabaseWrapper
from psycopg import errors as pg_errors

from idempotency.models import IdempotencyKey
from orders.models import Order, Product
from tests.abuse.test_per_user_caps import post_order
from tests.cluster.conftest import LOCK_TIMEOUT_MS, pooled_settings
from tests.concurrency.helpers import run_at_once
from tests.conftest import client_for, new_key
from tests.factories import ProductFactory, UserFactory
from tests.processes import session_ended_before

pytestmark = pytest.mark.django_db(transaction=True)


def wrapper(settings_dict: dict[str, object]) -> DatabaseWrapper:
    return DatabaseWrapper(settings_dict, alias="probe")


def hold_a_server_connection(bouncer_url: str) -> psycopg.Connection[tuple[object, ...]]:
    """Another client, inside a transaction: it keeps one server connection busy."""
    other = psycopg.connect(bouncer_url)
    other.execute("SELECT 1")
    return other


def test_the_lock_timeout_option_is_refused_so_the_pooler_sets_it(pgbouncer):
    # Given a direct connection's settings (lock_timeout as a startup option)
    direct = wrapper(pooled_settings(pgbouncer, transaction_pooling=False))
    # Then PgBouncer refuses the connection outright
    with pytest.raises(OperationalError, match="unsupported startup parameter: options"):
        direct.ensure_connection()

    # Given the pooled settings, every server connection still has the lock timeout
    pooled = wrapper(pooled_settings(pgbouncer, transaction_pooling=True))
    try:
        with pooled.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            assert cursor.fetchone()[0] == f"{LOCK_TIMEOUT_MS}ms"
    finally:
        pooled.close()


def test_a_row_lock_wait_through_the_pooler_ends_at_the_lock_timeout(through_pgbouncer):
    product = ProductFactory.create()
    locker = psycopg.connect(through_pgbouncer.url(connection.settings_dict["NAME"]))
    try:
        locker.execute("SELECT 1 FROM orders_product WHERE id = %s FOR UPDATE", (product.pk,))
        started = time.monotonic()
        with pytest.raises(OperationalError) as raised, transaction.atomic():
            Product.objects.select_for_update().get(pk=product.pk)
        # What edge/handler.py turns into 503 `lock-timeout`.
        assert isinstance(raised.value.__cause__, pg_errors.LockNotAvailable)
        assert time.monotonic() - started < 5
    finally:
        locker.close()


def test_prepared_statements_are_off_so_a_repeated_query_survives_a_new_server(
    through_pgbouncer,
):
    url = through_pgbouncer.url(connection.settings_dict["NAME"])
    # Given psycopg's default: a query run five times is prepared on that server...
    raw = psycopg.connect(url, autocommit=True)
    try:
        for n in range(6):
            raw.execute("SELECT %s::int", (n,))
        other = hold_a_server_connection(url)
        # ...and the next run, on another server connection, finds no such statement.
        with pytest.raises(pg_errors.InvalidSqlStatementName):
            raw.execute("SELECT %s::int", (6,))
        other.close()
    finally:
        raw.close()

    # With the pooled settings, the same pattern through Django's connection works.
    product = ProductFactory.create()
    for _ in range(6):
        assert Product.objects.get(pk=product.pk).pk == product.pk
    other = hold_a_server_connection(url)
    try:
        assert Product.objects.get(pk=product.pk).pk == product.pk
    finally:
        other.close()


def test_server_side_cursors_are_off_so_iterator_survives_a_new_server(through_pgbouncer):
    ProductFactory.create_batch(5)
    url = through_pgbouncer.url(connection.settings_dict["NAME"])

    # Given server-side cursors (Django's default), .iterator() DECLAREs a cursor
    # WITH HOLD in one transaction and FETCHes in the next, on another server.
    direct_like = dict(connection.settings_dict, DISABLE_SERVER_SIDE_CURSORS=False)
    probe = wrapper(direct_like)
    other = None
    try:
        rows = Product.objects.order_by("pk").values_list("pk", flat=True)
        compiler = rows.query.get_compiler(connection=probe)
        iterator = iter(compiler.results_iter(chunked_fetch=True, chunk_size=2))
        next(iterator)
        other = hold_a_server_connection(url)
        # (Django's cursor_iter then fails to CLOSE it too: psycopg's own error.)
        with pytest.raises((DatabaseError, pg_errors.InvalidCursorName), match="does not exist"):
            list(iterator)
    finally:
        if other is not None:
            other.close()
        probe.close()

    # With the pooled settings the same iteration reads every row.
    seen: list[int] = []
    for pk in Product.objects.order_by("pk").values_list("pk", flat=True).iterator(chunk_size=2):
        if not seen:
            other = hold_a_server_connection(url)
        seen.append(pk)
    assert other is not None
    other.close()
    assert len(seen) == 5


@pytest.mark.slow
def test_the_per_user_advisory_lock_still_serialises_creations_through_the_pooler(
    settings, through_pgbouncer
):
    # pg_advisory_xact_lock ends with its transaction: it cannot outlive it on a
    # pooled server connection, where a session lock would stay for the next client.
    cap = 3
    settings.MAX_OPEN_ORDERS_PER_USER = cap
    user = UserFactory.create()
    product = ProductFactory.create(stock=100)
    token = user.auth_token.key
    threads = 8

    def create(_: int) -> int:
        api = client_for(None)
        api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        return int(post_order(api, product, new_key()).status_code)

    statuses = run_at_once(threads, create)

    assert sorted(statuses) == [201] * cap + [409] * (threads - cap)
    assert Order.objects.filter(user=user).count() == cap
    assert IdempotencyKey.objects.filter(user=user).count() == cap
    assert Product.objects.get(pk=product.pk).stock == 100 - cap
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        assert cursor.fetchone()[0] == 0  # nothing left held on any server connection


def test_a_server_session_ended_mid_request_is_503_and_the_retry_creates_the_order(
    through_pgbouncer,
):
    # A server session terminated between two statements of a request's transaction:
    # PgBouncer relays the server's goodbye (57P01) to the client linked to it. (When
    # the pooler sees the break first it says "server conn crashed?", 08P01 instead:
    # tests/test_errors.py maps that one; its timing cannot be chosen from here.)
    user, product = UserFactory.create(), ProductFactory.create(stock=10)
    api, key = client_for(user), new_key()
    # Just before the order's INSERT, the server session serving this client ends.
    with session_ended_before('INSERT INTO "orders_order"') as ended:
        lost = post_order(api, product, key)
    retried = post_order(api, product, key)

    assert ended
    assert lost.status_code == 503
    assert lost.json()["code"] == "service-unavailable"
    assert lost["Retry-After"]
    # What the lost session had not committed went with it: the retry runs afresh.
    assert retried.status_code == 201
    assert retried["Idempotent-Replayed"] == "false"
    assert Order.objects.filter(user=user).count() == 1
    assert Product.objects.get(pk=product.pk).stock == 9
