"""The provider client's connections: kept alive, and a stale one is never a 503.

A real socket server on loopback that behaves like a provider (or a proxy in
front of one) closing idle keep-alive connections: it answers the first request
on a connection, then closes the connection when the next request arrives on it,
without answering. Without the one safe retry (payments/providers/http.py) the
second call fails and the pay path answers 503 ``payment-outcome-unknown``.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from payments.providers import ProviderOutcomeUnknown, get_provider
from payments.providers.sandbox import SandboxProvider

CHARGE = json.dumps({"out_trade_no": "ref-1", "status": "DECLINED"}).encode()


@dataclass
class ClosingProvider:
    """Answers one request per connection, then drops the connection unanswered."""

    listener: socket.socket
    connections: int = 0
    answered: int = 0
    dropped: int = 0
    threads: list[threading.Thread] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/sandbox"

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed: the test is over
            self.connections += 1
            thread = threading.Thread(target=self._one_connection, args=(conn,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _one_connection(self, conn: socket.socket) -> None:
        with conn:
            if not _read_request(conn):
                return
            self.answered += 1  # counted before the client can read the answer
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(CHARGE)}\r\n\r\n".encode()
                + CHARGE
            )
            if _read_request(conn):  # the next request on this kept-alive connection
                self.dropped += 1  # closed under it, unanswered, as an idle timeout does


def _read_request(conn: socket.socket) -> bool:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return False
        data += chunk
    return True


@pytest.fixture
def closing_provider() -> Iterator[ClosingProvider]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    provider = ClosingProvider(listener=listener)
    threading.Thread(target=provider.serve, daemon=True).start()
    try:
        yield provider
    finally:
        listener.close()


def _client(url: str) -> SandboxProvider:
    return SandboxProvider(base_url=url, api_key="k", timeout_s=2.0, webhook_secrets=["s"])


def test_a_connection_closed_by_the_provider_is_retried_on_a_new_one(closing_provider):
    client = _client(closing_provider.url)

    first = client.query(out_trade_no="ref-1")
    # The connection is kept; the provider closes it when the next request arrives.
    second = client.query(out_trade_no="ref-1")

    assert first == second
    assert first is not None
    assert first.out_trade_no == "ref-1"
    assert closing_provider.dropped == 1  # the stale connection was really used
    assert closing_provider.connections == 2  # and one new connection replaced it
    assert closing_provider.answered == 2


def test_a_provider_that_never_answers_is_not_asked_twice():
    # A read timeout is not a stale connection: the provider may be working on it.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    client = SandboxProvider(
        base_url=f"http://127.0.0.1:{listener.getsockname()[1]}",
        api_key="k",
        timeout_s=0.3,
        webhook_secrets=["s"],
    )
    try:
        with pytest.raises(ProviderOutcomeUnknown):
            client.query(out_trade_no="ref-1")
        assert len(accepted) == 1
    finally:
        listener.close()
        for conn in accepted:
            conn.close()


def test_the_shop_keeps_one_provider_client_per_process(settings):
    # The pay path asks get_provider() on every pay: the same client, the same pool
    # of kept-alive connections, not a new TCP connection per pay.
    assert get_provider() is get_provider()
    before = get_provider()

    settings.PROVIDER_BASE_URL = "http://127.0.0.1:9/elsewhere"

    assert get_provider() is not before  # another configuration, another client
