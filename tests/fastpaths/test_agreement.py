"""The key layer's fast paths answer what the core alone answers, row by row of the matrix.

Each row of the behaviour matrix (tests/idempotency/test_behaviour_matrix.py,
on order creation) runs twice from the same database: once through the core
alone (its defaults: no replay middleware, DRF's token authentication, the ORM
record store, ``idempotency.core.execute``) and once through the fast paths as
the shipped settings plug them in (``fastpaths/replay.py``, ``fastpaths/auth.py``,
``fastpaths/records.py``). Both must give the same status, the same body bytes,
the same headers, and leave the same rows in idempotency_key and orders.

The two runs start alike: each runs in a savepoint rolled back after it, the
sequences are put back where they were (ids match), the clock is stopped at one
instant and order numbers are counted (timestamps and numbers match).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

import pytest
import redis
from django.conf import settings
from django.db import connection, transaction
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.authentication import SessionAuthentication
from rest_framework.views import APIView

from edge.auth import TokenAuthentication
from edge.throttling import UserRateThrottle
from fastpaths.auth import ReadTokenAuthentication
from idempotency.core import fingerprint
from idempotency.drf import DEFAULT_RUNNER
from idempotency.models import IdempotencyKey
from orders import services as order_services
from orders.models import Order, OrderLine
from tests.conftest import client_for
from tests.factories import DEFAULT_PASSWORD

pytestmark = pytest.mark.django_db

ORDERS = "/api/v1/orders/"
REPLAY_MIDDLEWARE = "fastpaths.replay.ReplayMiddleware"
# Headers that differ between any two answers, whatever path gave them.
PER_ANSWER = {"x-request-id", "date"}


# --- The two ways through -----------------------------------------------------------


@contextmanager
def core_alone() -> Iterator[None]:
    """Every key-layer seam at the core's default."""
    middleware = [name for name in settings.MIDDLEWARE if name != REPLAY_MIDDLEWARE]
    # DRF reads DEFAULT_AUTHENTICATION_CLASSES once, when APIView is defined: the class
    # attribute is what the views use, so it is what is set here.
    with (
        override_settings(
            MIDDLEWARE=middleware,
            IDEMPOTENCY_RECORDS="idempotency.records",
            IDEMPOTENCY_RUNNER=DEFAULT_RUNNER,
        ),
        mock.patch.object(
            APIView, "authentication_classes", [TokenAuthentication, SessionAuthentication]
        ),
    ):
        yield


@contextmanager
def fast_paths() -> Iterator[None]:
    """The shipped settings, which plug every fast path of the key layer in."""
    assert REPLAY_MIDDLEWARE in settings.MIDDLEWARE
    assert settings.IDEMPOTENCY_RECORDS == "fastpaths.records"
    assert APIView.authentication_classes[0] is ReadTokenAuthentication
    yield


# --- One row of the matrix, as a client sends it ----------------------------------------


@dataclass
class Shop:
    """What a row sends with: the users' API clients (made under the arm's settings)."""

    user: Any
    other_user: Any
    product: Any
    api: Any
    others_api: Any
    keys: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def new_key(self) -> str:
        """The run's next key: the two runs of a row send the same keys."""
        return f"agreement-{next(self.keys)}"

    def order(
        self,
        key: str | None,
        *,
        quantity: int = 1,
        body: Any = None,
        api: Any = None,
    ) -> Any:
        payload = (
            body
            if body is not None
            else {"lines": [{"sku": self.product.sku, "quantity": quantity}]}
        )
        headers = {} if key is None else {"Idempotency-Key": key}
        return (api or self.api).post(ORDERS, payload, format="json", headers=headers)


def plant_locked_record(shop: Shop, *, key: str, lock_age_s: float) -> None:
    """A committed, unfinished order-creation record whose lock is ``lock_age_s`` old."""
    locked_at = timezone.now() - timedelta(seconds=lock_age_s)
    body = {"lines": [{"sku": shop.product.sku, "quantity": 1}]}
    IdempotencyKey.objects.create(
        user=shop.user,
        key=key,
        fingerprint=fingerprint(method="POST", path=ORDERS, body=body),
        method="POST",
        path=ORDERS,
        lock_token=uuid.uuid4(),
        locked_at=locked_at,
        created_at=locked_at,
    )


def _header_missing(shop: Shop) -> list[Any]:
    return [shop.order(None)]


def _header_malformed(shop: Shop) -> list[Any]:
    return [shop.order(raw) for raw in ["", "has space", "x" * 256, '"unterminated']]


def _not_authenticated(shop: Shop) -> list[Any]:
    wrong = client_for(None)
    wrong.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    key = shop.new_key()
    return [shop.order(key, api=client_for(None)), shop.order(key, api=wrong)]


def _inactive_user(shop: Shop) -> list[Any]:
    key = shop.new_key()
    first = shop.order(key)
    type(shop.user).objects.filter(pk=shop.user.pk).update(is_active=False)
    return [first, shop.order(key)]


def _forbidden(shop: Shop) -> list[Any]:
    browser = Client(enforce_csrf_checks=True)
    assert browser.login(username=shop.user.username, password=DEFAULT_PASSWORD)
    body = {"lines": [{"sku": shop.product.sku, "quantity": 1}]}
    headers = {"Idempotency-Key": shop.new_key()}
    return [browser.post(ORDERS, body, content_type="application/json", headers=headers)]


def _throttled(shop: Shop) -> list[Any]:
    # A fresh window for this user in each run (Redis is not rolled back with the rows).
    redis.Redis.from_url(settings.REDIS_URL).delete(
        f"throttle:user:{shop.user.pk}:{int(time.time() // 3600)}"
    )
    with mock.patch.object(UserRateThrottle, "rate", "1/hour", create=True):
        key = shop.new_key()
        return [shop.order(key), shop.order(key), shop.order(shop.new_key())]


def _body_invalid(shop: Shop) -> list[Any]:
    bodies: list[Any] = [{}, {"lines": []}, {"lines": [{"sku": "X", "quantity": "two"}]}, [1, 2]]
    return [shop.order(shop.new_key(), body=body) for body in bodies]


def _new_key_then_replay(shop: Shop) -> list[Any]:
    key = shop.new_key()
    return [shop.order(key), shop.order(key), shop.order(f'"{key}"')]


def _in_flight(shop: Shop) -> list[Any]:
    answers = []
    for lock_age_s in (0, 3, 10, 59):
        plant_locked_record(shop, key=(key := shop.new_key()), lock_age_s=lock_age_s)
        answers.append(shop.order(key))
    return answers


def _abandoned_lock(shop: Shop) -> list[Any]:
    key = shop.new_key()
    plant_locked_record(shop, key=key, lock_age_s=settings.IDEMPOTENCY_LOCK_TIMEOUT + 1)
    return [shop.order(key), shop.order(key)]


def _another_body(shop: Shop) -> list[Any]:
    key = shop.new_key()
    return [
        shop.order(key, quantity=1),
        shop.order(key, quantity=2),
        shop.order(key, body={"lines": []}),
    ]


def _business_error(shop: Shop) -> list[Any]:
    key, quantity = shop.new_key(), shop.product.stock + 1
    return [shop.order(key, quantity=quantity), shop.order(key, quantity=quantity)]


def _unexpected_exception(shop: Shop) -> list[Any]:
    key = shop.new_key()

    def explode(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected")

    with mock.patch.object(order_services, "_reserve", explode):
        crashed = shop.order(key)
    return [crashed, shop.order(key), shop.order(key)]


def _scoped_per_user(shop: Shop) -> list[Any]:
    key = shop.new_key()
    return [shop.order(key), shop.order(key, api=shop.others_api), shop.order(key)]


ROWS: dict[str, Callable[[Shop], list[Any]]] = {
    "header-missing": _header_missing,
    "header-malformed": _header_malformed,
    "not-authenticated": _not_authenticated,
    "inactive-user": _inactive_user,
    "forbidden": _forbidden,
    "throttled": _throttled,
    "body-invalid": _body_invalid,
    "new-key-then-replay": _new_key_then_replay,
    "in-flight": _in_flight,
    "abandoned-lock": _abandoned_lock,
    "another-body": _another_body,
    "business-error": _business_error,
    "unexpected-exception": _unexpected_exception,
    "scoped-per-user": _scoped_per_user,
}

# The rows with a finished record replayed to a token request.
REPLAYING = {"new-key-then-replay", "business-error", "scoped-per-user"}


# --- Running a row from the same start, and what it leaves ------------------------------


@dataclass
class Run:
    answers: list[tuple[int, bytes, dict[str, str]]]
    rows: dict[str, list[dict[str, Any]]]
    statements: int


def _sequences() -> list[tuple[str, int | None]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT schemaname || '.' || sequencename, last_value FROM pg_sequences"
            " WHERE schemaname = current_schema()"
        )
        return list(cursor.fetchall())


def _put_back(sequences: list[tuple[str, int | None]]) -> None:
    with connection.cursor() as cursor:
        for name, last_value in sequences:
            if last_value is None:
                cursor.execute("SELECT setval(%s, 1, false)", [name])
            else:
                cursor.execute("SELECT setval(%s, %s, true)", [name, last_value])


def _rows() -> dict[str, list[dict[str, Any]]]:
    def rows_of(model: Any) -> list[dict[str, Any]]:
        return [dict(row) for row in model.objects.order_by("id").values()]

    records = rows_of(IdempotencyKey)
    for record in records:  # a random token each time: whether one is held is what counts
        record["lock_token"] = record["lock_token"] is not None
    return {"idempotency_key": records, "orders": rows_of(Order), "order_lines": rows_of(OrderLine)}


def run(
    row: Callable[[Shop], list[Any]],
    arm: Callable[[], Any],
    user: Any,
    other_user: Any,
    product: Any,
    *,
    at: datetime,
) -> Run:
    """``row`` through ``arm`` with the clock stopped ``at``; everything it wrote undone."""
    sequences = _sequences()
    numbers = itertools.count(1)

    def numbered() -> str:
        return f"20260101-{next(numbers):010X}"

    try:
        with (
            transaction.atomic(),
            arm(),
            mock.patch("django.utils.timezone.now", return_value=at),
            mock.patch.object(
                order_services,
                "_new_order_number",
                side_effect=lambda: f"20260101-{next(numbers):010X}",
            ),
            CaptureQueriesContext(connection) as queries,
        ):
            shop = Shop(user, other_user, product, client_for(user), client_for(other_user))
            answers = [
                (
                    response.status_code,
                    response.content,
                    {k: v for k, v in response.headers.items() if k.lower() not in PER_ANSWER},
                )
                for response in row(shop)
            ]
            result = Run(answers=answers, rows=_rows(), statements=len(queries))
            transaction.set_rollback(True)
    finally:
        _put_back(sequences)
    return result


@pytest.mark.parametrize("name", ROWS)
def test_the_fast_paths_answer_and_write_what_the_core_alone_does(name, user, other_user, product):
    at = timezone.now()
    core = run(ROWS[name], core_alone, user, other_user, product, at=at)
    fast = run(ROWS[name], fast_paths, user, other_user, product, at=at)

    assert fast.answers == core.answers
    assert fast.rows == core.rows
    if name in REPLAYING:  # each went its own way: the replay cost the fast path less
        assert fast.statements < core.statements
