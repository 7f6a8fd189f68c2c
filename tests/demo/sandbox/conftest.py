"""Fixtures of the sandbox provider's tests: merchant clients, a local merchant
endpoint to deliver notifications to, and an observed enqueue.

No sandbox test sends anything to the real broker unless it asks for a real
worker: notification enqueues go through
``demo.sandbox.services.notifications.notification_enqueue`` and late successes
through ``demo.sandbox.services.late_success.late_success_enqueue``, which the autouse
fixture below replaces with recorders (transactional tests do run on_commit hooks).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from demo.sandbox.services import late_success, notifications
from tests.conftest import client_for
from tests.factories import UserFactory

CHARGES = "/sandbox/v1/charges"
REFUNDS = "/sandbox/v1/refunds"
FAULTS = "/sandbox/v1/faults"
NOTIFY_ORIGIN = "http://127.0.0.1:9"
NOTIFY_URL = f"{NOTIFY_ORIGIN}/callbacks/sandbox/"  # never contacted: enqueue is observed


def new_ref() -> str:
    return f"P-{uuid.uuid4().hex[:16]}"


def charge_body(**overrides: Any) -> dict[str, Any]:
    body = {
        "out_trade_no": new_ref(),
        "amount": 1999,
        "currency": "CNY",
        "payer": "alice",
        "notify_url": NOTIFY_URL,
    }
    return {**body, **overrides}


def refund_body(out_trade_no: str, **overrides: Any) -> dict[str, Any]:
    body = {
        "out_refund_no": f"R-{uuid.uuid4().hex[:16]}",
        "out_trade_no": out_trade_no,
        "amount": 500,
        "notify_url": NOTIFY_URL,
    }
    return {**body, **overrides}


@pytest.fixture(autouse=True)
def notify_allow_list(settings: Any) -> list[str]:
    """The merchant endpoint of these tests is the one notify_url allowed."""
    settings.SANDBOX_NOTIFY_URLS = [NOTIFY_ORIGIN]
    return settings.SANDBOX_NOTIFY_URLS


def merchant_client(key: str | None = None) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key or settings.SANDBOX_API_KEYS[0]}")
    return client


@pytest.fixture
def merchant() -> APIClient:
    return merchant_client()


@pytest.fixture
def staff() -> APIClient:
    user: User = UserFactory.create(is_staff=True)
    return client_for(user)


@pytest.fixture
def charge(merchant: APIClient) -> Callable[..., Any]:
    """POST /sandbox/v1/charges: ``charge(body, key=...)``; a fresh key when not given."""

    def post(body: dict[str, Any], key: str | None = None) -> Any:
        headers = {"Idempotency-Key": str(uuid.uuid4()) if key is None else key}
        return merchant.post(CHARGES, body, format="json", headers=headers)

    return post


@pytest.fixture
def refund(merchant: APIClient) -> Callable[..., Any]:
    """POST /sandbox/v1/refunds: ``refund(body, key=...)``; a fresh key when not given."""

    def post(body: dict[str, Any], key: str | None = None) -> Any:
        headers = {"Idempotency-Key": str(uuid.uuid4()) if key is None else key}
        return merchant.post(REFUNDS, body, format="json", headers=headers)

    return post


@pytest.fixture
def paid(charge: Callable[..., Any]) -> Callable[..., dict[str, Any]]:
    """A SUCCESS charge of ``amount`` (default 1999) for alice: its JSON."""

    def make(amount: int = 1999, payer: str = "alice") -> dict[str, Any]:
        response = charge(charge_body(amount=amount, payer=payer))
        assert response.json()["status"] == "SUCCESS", response.json()
        return response.json()

    return make


@pytest.fixture
def arm(staff: APIClient) -> Callable[..., Any]:
    """Arm a fault through the staff API: ``arm("decline", count=2)``."""

    def post(mode: str, **params: Any) -> Any:
        response = staff.post(FAULTS, {"mode": mode, **params}, format="json")
        assert response.status_code == 201, response.json()
        return response

    return post


# --- Observed enqueue -------------------------------------------------------------------


@dataclass
class Enqueued:
    calls: list[tuple[int, float]] = field(default_factory=list)
    late_successes: list[tuple[int, float]] = field(default_factory=list)
    refund_late_successes: list[tuple[int, float]] = field(default_factory=list)
    real: Callable[..., None] = notifications.notification_enqueue

    def record(self, *, notification_id: int, countdown: float) -> None:
        self.calls.append((notification_id, countdown))

    def record_late_success(self, *, charge_id: int, countdown: float) -> None:
        self.late_successes.append((charge_id, countdown))

    def record_refund_late_success(self, *, refund_id: int, countdown: float) -> None:
        self.refund_late_successes.append((refund_id, countdown))


@pytest.fixture(autouse=True)
def enqueued(monkeypatch: pytest.MonkeyPatch) -> Enqueued:
    recorder = Enqueued()
    monkeypatch.setattr(notifications, "notification_enqueue", recorder.record)
    monkeypatch.setattr(late_success, "late_success_enqueue", recorder.record_late_success)
    monkeypatch.setattr(
        late_success, "refund_late_success_enqueue", recorder.record_refund_late_success
    )
    return recorder


# --- A merchant endpoint on loopback ----------------------------------------------------


@dataclass
class Receiver:
    """A real HTTP server on 127.0.0.1 that answers the scripted codes in order, then 200."""

    url: str
    answers: list[int]
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    state = Receiver(url="", answers=[])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.received.append((dict(self.headers.items()), body))
            self.send_response(state.answers.pop(0) if state.answers else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep the test output clean

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/callbacks/sandbox/"
    # The provider notifies only URLs on its allow-list: this merchant is on it.
    settings.SANDBOX_NOTIFY_URLS = [*settings.SANDBOX_NOTIFY_URLS, state.url]
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
