"""Shared fixtures. Every test talks to the real PostgreSQL and Redis of the run.

Payments go to the real sandbox provider, served over HTTP by pytest-django's
live server (a threaded server in this process, on loopback); the shop reaches
it only through PROVIDER_BASE_URL, exactly as in production.
"""

import time
import uuid
from collections.abc import Callable, Iterator
from importlib.util import find_spec
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, connection, connections
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from config.celery import app as celery_app
from config.i18n import compile_catalogues
from edge import throttling
from orders.models import Order, Product
from tests.factories import ProductFactory, UserFactory
from tests.workers import RUNNING, TEST_QUEUE, Worker, start_worker

# Tasks sent by tests go to their own queue on the real broker (TEST_QUEUE), emptied
# before and after the run, so no stale message ever reaches a worker a test starts.


# Property tests check what is drawn, not how fast: on a shared 2-core machine a first
# draw that builds hypothesis's caches may take seconds. Every example still runs.
hypothesis_settings.register_profile(
    "onceshop", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("onceshop")

# The demo (demo/) may be absent: a fork that deleted it runs the product's tests
# alone (tests/test_product_alone.py), and so does `pytest -m "not demo"`.
DEMO_PRESENT = find_spec("demo") is not None
# A test needs the demo when it is one of the demo's own or uses the stand-in
# provider, which every fixture that pays, refunds or reads a wallet is built on.
DEMO_FIXTURES = {"sandbox"}


def pytest_sessionstart(session: pytest.Session) -> None:
    # The pages are tested in both languages: the catalogue must be compiled, as
    # `make install` does, even when pytest is run directly after a .po changed
    # (config/i18n.py).
    compile_catalogues()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `demo` every test that needs the demo: under tests/demo, or using the sandbox."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.nodeid.startswith("tests/demo/") or fixtures & DEMO_FIXTURES:
            item.add_marker(pytest.mark.demo)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Before any fixture is torn down, every running worker settles (tests/workers.py).

    The test's last task may still be running, or a retry waiting for its countdown;
    the database flush of a transactional test would race it (a deadlock, or
    lock_timeout) and fail, and the next test would see this one's rows.
    """
    unsettled = None
    for running in list(RUNNING):
        try:
            running.settle()
        except AssertionError as error:
            unsettled = error
    yield
    if unsettled is not None:
        raise unsettled


@pytest.fixture(scope="session", autouse=True)
def short_lived_connections() -> None:
    # The live server answers each request in a new thread; a persistent connection
    # would outlive its thread and, over a run, exhaust the server's connections.
    connections["default"].settings_dict["CONN_MAX_AGE"] = 0


@pytest.fixture(scope="session", autouse=True)
def celery_test_queue() -> Iterator[str]:
    celery_app.conf.task_default_queue = TEST_QUEUE
    broker = redis.Redis.from_url(django_settings.REDIS_URL)
    broker.delete(TEST_QUEUE)
    yield TEST_QUEUE
    broker.delete(TEST_QUEUE)


def new_key() -> str:
    return str(uuid.uuid4())


def client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {user.auth_token.key}")
    return client


@pytest.fixture
def user() -> User:
    return UserFactory.create()


@pytest.fixture
def other_user() -> User:
    return UserFactory.create()


@pytest.fixture
def client(user: User) -> APIClient:
    return client_for(user)


@pytest.fixture
def product() -> Product:
    return ProductFactory.create(stock=10, price=1999)


@pytest.fixture
def create_order(client: APIClient, product: Product) -> Callable[..., Any]:
    """POST /api/v1/orders/ for one line of ``product``; keyword overrides as needed."""

    def create(
        key: str | None = None,
        quantity: int = 1,
        sku: str | None = None,
        api: APIClient | None = None,
        body: Any = None,
    ) -> Any:
        payload = (
            body
            if body is not None
            else {"lines": [{"sku": sku or product.sku, "quantity": quantity}]}
        )
        headers = {} if key is None else {"Idempotency-Key": key}
        return (api or client).post("/api/v1/orders/", payload, format="json", headers=headers)

    return create


# Short enough for fast tests, long enough for a loaded 2-core CI machine.
TEST_PROVIDER_TIMEOUT_S = 2.0


@pytest.fixture
def sandbox(live_server: Any, settings: Any) -> str:
    settings.PROVIDER_BASE_URL = f"{live_server.url}/sandbox"
    settings.SHOP_BASE_URL = live_server.url
    settings.PROVIDER_TIMEOUT_S = TEST_PROVIDER_TIMEOUT_S
    return settings.PROVIDER_BASE_URL


@pytest.fixture
def staff() -> APIClient:
    return client_for(UserFactory.create(is_staff=True))


@pytest.fixture
def fault(staff: APIClient, sandbox: str) -> Callable[..., None]:
    """Script the sandbox's next charges (POST /sandbox/v1/faults)."""

    def add(mode: str, **options: Any) -> None:
        response = staff.post("/sandbox/v1/faults", {"mode": mode, **options}, format="json")
        assert response.status_code == 201, response.content

    return add


@pytest.fixture
def order(client: APIClient, product: Product) -> Order:
    response = client.post(
        "/api/v1/orders/",
        {"lines": [{"sku": product.sku, "quantity": 2}]},
        format="json",
        headers={"Idempotency-Key": new_key()},
    )
    assert response.status_code == 201
    return Order.objects.get(number=response.json()["number"])


@pytest.fixture
def pay(client: APIClient, order: Order, sandbox: str) -> Callable[..., Any]:
    """POST /api/v1/orders/{number}/pay/ with the given key (a new one by default)."""

    def send(
        key: str | None = None,
        *,
        number: str | None = None,
        api: APIClient | None = None,
        body: Any = None,
    ) -> Any:
        return (api or client).post(
            f"/api/v1/orders/{number or order.number}/pay/",
            body,
            format="json",
            headers={"Idempotency-Key": key or new_key()},
        )

    return send


@pytest.fixture
def wallet(sandbox: str) -> Callable[[User], dict[str, Any]]:
    """The payer's wallet as the provider reports it (0 charges if never seen)."""
    merchant = APIClient()

    def read(user: User) -> dict[str, Any]:
        merchant.credentials(HTTP_AUTHORIZATION=f"Bearer {django_settings.PROVIDER_API_KEY}")
        response = merchant.get(f"/sandbox/v1/wallets/{user.username}")
        if response.status_code == 404:
            return {"charged_total": 0, "refunded_total": 0, "charges": []}
        assert response.status_code == 200, response.content
        return response.json()

    return read


@pytest.fixture(scope="module")
def worker(django_db_setup: Any) -> Iterator[Worker]:
    """A real Celery worker process consuming TEST_QUEUE, for this test module."""
    yield from start_worker()


@pytest.fixture
def paid_order(pay: Callable[..., Any], order: Order) -> Order:
    """``order``, paid through the API (one capture)."""
    assert pay().status_code == 200
    return Order.objects.get(pk=order.pk)


@pytest.fixture
def refund(client: APIClient, order: Order, sandbox: str) -> Callable[..., Any]:
    """POST /api/v1/orders/{number}/refunds/ with the given key (a new one by default)."""

    def send(
        key: str | None = None,
        *,
        body: Any = None,
        number: str | None = None,
        api: APIClient | None = None,
    ) -> Any:
        return (api or client).post(
            f"/api/v1/orders/{number or order.number}/refunds/",
            {} if body is None else body,
            format="json",
            headers={"Idempotency-Key": key or new_key()},
        )

    return send


@pytest.fixture
def still_clock(monkeypatch: pytest.MonkeyPatch) -> float:
    """Hold the rate limits' clock at one instant: a test's requests all fall in one
    window (a window ending mid-test would reset a count). Only the windows' clock:
    Redis expiries, the database and everything else keep real time."""
    now = time.time()
    monkeypatch.setattr(throttling, "clock", lambda: now)
    return now


@pytest.fixture
def wsgi_in_test_transaction() -> Iterator[None]:
    """Let tests call ``config.wsgi.application`` itself inside the test's transaction.

    Like Django's test client, keep the request signals from closing the test's
    connection (an open transaction, to Django an obsolete connection).
    """
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def poison() -> Iterator[Callable[..., None]]:
    """``poison(table, when)``: the database refuses every write of ``table`` whose rows
    match ``when`` (a trigger's WHEN on NEW/OLD), until the test ends."""
    made: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE OR REPLACE FUNCTION test_poisoned_row() RETURNS trigger LANGUAGE plpgsql "
            "AS $$ BEGIN RAISE EXCEPTION 'poisoned row in %', TG_TABLE_NAME; END $$"
        )

    def add(table: str, when: str, *, event: str = "UPDATE") -> None:
        name = f"test_poison_{len(made)}"
        with connection.cursor() as cursor:
            cursor.execute(
                f"CREATE TRIGGER {name} BEFORE {event} ON {table} FOR EACH ROW "
                f"WHEN ({when}) EXECUTE FUNCTION test_poisoned_row()"
            )
        made.append(f"{name} ON {table}")

    try:
        yield add
    finally:
        with connection.cursor() as cursor:
            for trigger in made:
                cursor.execute(f"DROP TRIGGER IF EXISTS {trigger}")
