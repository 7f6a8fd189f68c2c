"""A crash in the middle of order creation leaves nothing behind; the same key then works."""

import pytest
from django.db import connection

from idempotency.models import IdempotencyKey
from orders.models import InventoryMovement, Order, Product
from tests.conftest import new_key
from tests.processes import run_django

pytestmark = pytest.mark.django_db(transaction=True)


def assert_nothing_left(product: Product) -> None:
    assert Order.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0
    assert InventoryMovement.objects.filter(kind="RESERVE").count() == 0
    assert Product.objects.get(pk=product.pk).stock == product.stock


def test_exception_after_the_order_insert_before_commit_leaves_nothing(create_order, product):
    key = new_key()

    def fail_on_the_record(execute, sql, params, many, context):
        # Every business row is written by now; the record, inserted finished with
        # its answer, is the last statement before COMMIT.
        if sql.startswith('INSERT INTO "idempotency_idempotencykey"'):
            raise ConnectionResetError("injected: connection lost before commit")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(fail_on_the_record):
        crashed = create_order(key=key)

    assert crashed.status_code == 500
    assert_nothing_left(product)
    retried = create_order(key=key)
    assert retried.status_code == 201
    assert retried["Idempotent-Replayed"] == "false"
    assert Order.objects.count() == 1


def test_process_killed_after_the_order_insert_leaves_nothing(create_order, product, user):
    key = new_key()

    # Given a server process that dies (SIGKILL-like: os._exit) right after
    # inserting the order, while its transaction is still open
    child = run_django(f"""
        import os
        from django.db import connection
        from rest_framework.test import APIClient

        def die_after_order_insert(execute, sql, params, many, context):
            result = execute(sql, params, many, context)
            if sql.startswith('INSERT INTO "orders_order"'):
                os._exit(137)
            return result

        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Token {user.auth_token.key}")
        with connection.execute_wrapper(die_after_order_insert):
            client.post("/api/v1/orders/", {{"lines": [{{"sku": "{product.sku}", "quantity": 1}}]}},
                        format="json", headers={{"Idempotency-Key": "{key}"}})
    """)

    # Then PostgreSQL rolled the whole transaction back, record included
    assert child.returncode == 137, child.stderr
    assert_nothing_left(product)
    # And the client's retry with the same key creates the order once
    retried = create_order(key=key)
    assert retried.status_code == 201
    assert Order.objects.count() == 1
