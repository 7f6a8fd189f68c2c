"""Redis stopped and started again under load: no 5xx but 503 with Retry-After.

Customers hit every kind of endpoint of the live server (catalogue, orders, pay,
the token endpoint, the callback endpoint, the login page, the checkout) over
HTTP while the shop's Redis, a server of the test's own, is stopped and started
again. Not one answer may be a 500 (docs/design.md, "Redis down"); the only
server error allowed is 503 with ``Retry-After``. Afterwards nothing is lost:
every order key replays its first answer, the sweeps ship what the lost
enqueues did not, and the audit is clean.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from django.contrib.auth.models import User

from operations.audit.run import audit_run
from operations.statements.passes import pass_run_once
from orders.models import Order, Product, Shipment
from tests.conftest import new_key
from tests.factories import DEFAULT_PASSWORD, ProductFactory, UserFactory
from tests.redis_servers import own_redis

pytestmark = pytest.mark.django_db(transaction=True)

CUSTOMERS = 4
# Answers each phase must have seen before the next begins (awaited, not slept for):
# enough that every customer went round its endpoints a few times in each.
ANSWERS_PER_PHASE = 120
PHASE_TIMEOUT_S = 120
HIDDEN = re.compile(r'name="(csrfmiddlewaretoken|checkout_token)" value="([^"]+)"')


@dataclass
class Answer:
    phase: str
    method: str
    path: str
    status: int
    retry_after: str


@dataclass
class Load:
    """What every customer was answered, and the phase the test is in."""

    phase: str = "up"
    answers: list[Answer] = field(default_factory=list)
    order_keys: list[tuple[User, str, str, int]] = field(
        default_factory=list
    )  # user, key, sku, status
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, response: requests.Response) -> requests.Response:
        request = response.request
        path = str(request.url).split("//", 1)[1].split("/", 1)[1]
        with self.lock:
            self.answers.append(
                Answer(
                    self.phase,
                    str(request.method),
                    "/" + path,
                    response.status_code,
                    response.headers.get("Retry-After", ""),
                )
            )
        return response

    def count(self, phase: str) -> int:
        with self.lock:
            return sum(1 for answer in self.answers if answer.phase == phase)


def hidden(page: str) -> dict[str, str]:
    return dict(HIDDEN.findall(page))


def customer(base: str, user: User, product: Product, load: Load) -> None:
    api = requests.Session()
    api.headers["Authorization"] = f"Token {user.auth_token.key}"
    web = requests.Session()
    get: Callable[..., requests.Response] = lambda s, path, **kw: load.record(  # noqa: E731
        s.get(base + path, timeout=30, **kw)
    )
    post: Callable[..., requests.Response] = lambda s, path, **kw: load.record(  # noqa: E731
        s.post(base + path, timeout=30, **kw)
    )
    while not load.stop.is_set():
        get(api, "/api/v1/products/")
        key = new_key()
        body = {"lines": [{"sku": product.sku, "quantity": 1}]}
        created = post(api, "/api/v1/orders/", json=body, headers={"Idempotency-Key": key})
        with load.lock:
            load.order_keys.append((user, key, product.sku, created.status_code))
        if created.status_code == 201:
            number = created.json()["number"]
            post(
                api,
                f"/api/v1/orders/{number}/pay/",
                json={},
                headers={"Idempotency-Key": new_key()},
            )
        get(api, "/api/v1/orders/")
        post(
            api,
            "/api/v1/auth/token/",
            data={"username": user.username, "password": DEFAULT_PASSWORD},
        )
        post(api, "/api/v1/callbacks/sandbox/", json={})
        # The pages: the login form, then the checkout behind its one-time token.
        login = get(web, "/login/")
        form = {"username": user.username, "password": DEFAULT_PASSWORD, **hidden(login.text)}
        post(web, "/login/", data=form, allow_redirects=False)
        home = get(web, "/")
        fields = hidden(home.text)
        if "checkout_token" in fields:
            post(web, "/checkout/", data={**fields, f"qty-{product.sku}": "1"})


def await_answers(load: Load, phase: str) -> None:
    deadline = threading.Event()
    timer = threading.Timer(PHASE_TIMEOUT_S, deadline.set)
    timer.start()
    try:
        while load.count(phase) < ANSWERS_PER_PHASE:
            assert not deadline.wait(0.05), f"{phase}: only {load.count(phase)} answers"
    finally:
        timer.cancel()


def test_redis_stopped_and_started_under_load_answers_no_5xx_but_503_and_loses_nothing(
    sandbox, live_server, tmp_path: Path, settings
):
    settings.MAX_OPEN_ORDERS_PER_USER = 0  # the customers leave orders unpaid on purpose
    product = ProductFactory.create(stock=100_000, price=100)
    users = [UserFactory.create() for _ in range(CUSTOMERS)]
    load = Load()

    with own_redis(tmp_path / "redis") as redis_server:
        threads = [
            threading.Thread(target=customer, args=(live_server.url, user, product, load))
            for user in users
        ]
        for thread in threads:
            thread.start()
        try:
            # Given customers busy on every endpoint while Redis answers
            await_answers(load, "up")
            # When Redis is stopped for a while under them, then started again
            redis_server.stop()
            load.phase = "down"
            await_answers(load, "down")
            redis_server.start()
            load.phase = "back"
            await_answers(load, "back")
        finally:
            load.stop.set()
            for thread in threads:
                thread.join()

        # Then no answer was a server error other than 503 with Retry-After
        wrong = [
            a for a in load.answers if a.status >= 500 and not (a.status == 503 and a.retry_after)
        ]
        assert not wrong, wrong[:10]
        down = [a for a in load.answers if a.phase == "down"]
        # the outage was met: the checkout said 503, everything else went on unthrottled
        assert any(a.status == 503 and a.path in ("/", "/checkout/") for a in down), down
        assert any(a.status == 200 and a.path == "/api/v1/products/" for a in down)
        assert any(a.status == 201 and a.path == "/api/v1/orders/" for a in down)

        # and nothing is lost: every order key replays its first answer
        for user, key, sku, status in load.order_keys[:40]:
            again = requests.post(
                f"{live_server.url}/api/v1/orders/",
                json={"lines": [{"sku": sku, "quantity": 1}]},
                headers={"Authorization": f"Token {user.auth_token.key}", "Idempotency-Key": key},
                timeout=30,
            )
            if status == 201:
                assert again.status_code == 201, again.content
                assert again.headers.get("Idempotent-Replayed") == "true"
        # the periodic jobs ship the paid orders whose fulfil message was lost
        settings.FULFIL_SWEEP_AFTER_S = 0
        settings.RECONCILE_AFTER_S = 0
        pass_run_once()
        paid = Order.objects.filter(status="PAID")
        assert paid.exists()
        assert Shipment.objects.filter(order__in=paid).count() == paid.count()
        report = audit_run()
        assert report.ok, "\n".join(f"{f.invariant}: {f.message} {f.ids}" for f in report.findings)
