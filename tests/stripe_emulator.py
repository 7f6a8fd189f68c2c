"""localstripe, a stateful Stripe emulator (PyPI, a third party's), run as a real
server on a free loopback port, the way the tests run the sandbox.

What it does not do as Stripe does, and where the tests cover the behaviour the
flow depends on another way (docs/providers.md, "What the emulator cannot show"):

- it does not replay a POST by its Idempotency-Key: the same create twice makes
  two PaymentIntents. The flow never relies on the replay: the PaymentIntent's
  id is recorded before it is confirmed (charge_prepared), and every later call
  uses the recorded id;
- it has no search (``/v1/payment_intents/search`` is a 404), and nor does the
  adapter use one;
- it sends no refund events, always answers a refund ``succeeded`` at once, and
  never checks a refund against what is left of the charge (the shop does): a
  refund's ``pending`` / ``requires_action`` / ``failed`` / ``canceled`` are
  tested on Stripe's documented shapes (test_provider_stripe_parsing.py);
- it leaves a card PaymentIntent ``requires_action`` only for a 3-D Secure test
  card, completed through an endpoint of its own (``.../_authenticate``, with a
  publishable key, as Stripe.js would); it never shows ``processing`` for a card;
- it returns ``latest_charge`` expanded whether asked or not;
- it has no disputes, no refund ever fails, and its balance transactions are of
  two types only (``charge``, ``refund``): no payouts, fees, refund failures or
  dispute adjustments, and no ``created`` filter. ``StripeProxy`` below serves
  those in Stripe's documented shapes, in front of it, and answers a 429 where
  a test asks for one.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import requests
import stripe

STARTUP_S = 20.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _await_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"localstripe exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)  # polling the socket: the server has no readiness signal
    raise RuntimeError(f"localstripe did not listen on {port} within {STARTUP_S} s")


def localstripe_server() -> Iterator[str]:
    """Start localstripe on a free port; yield its URL; stop it."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "localstripe", "--port", str(port), "--from-scratch"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _await_listening(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


TEST_KEY = "sk_test_onceshop"
WEBHOOK_SECRET = "whsec_onceshop_tests"


def emulator(url: str) -> stripe.StripeClient:
    """A client of our own, to look at what localstripe holds (as a dashboard would)."""
    return stripe.StripeClient(TEST_KEY, base_addresses={"api": url}, max_network_retries=0)


def intents_of(url: str, out_trade_no: str) -> list[Any]:
    listed = emulator(url).v1.payment_intents.list(params={"limit": 100})
    intents = [intent.to_dict() for intent in listed.auto_paging_iter()]
    return [i for i in intents if (i.get("metadata") or {}).get("out_trade_no") == out_trade_no]


class StripeProxy:
    """A loopback proxy in front of localstripe that adds what it cannot show, in
    Stripe's documented shapes: balance transactions of every type (payouts, fees,
    refund failures, disputes' adjustments), a refund that failed after it
    succeeded, disputes (``GET /v1/disputes/{id}``), and a 429 or a 500 on the
    requests a test picks. Everything else goes through to localstripe as sent.

    ``on_request`` runs in the proxy's thread before each request is answered
    (a test checks there what the shop holds open while it waits on Stripe).
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.transactions: list[dict[str, Any]] = []  # added to localstripe's, newest first
        self.refunds: dict[str, dict[str, Any]] = {}  # refund id -> fields Stripe would show
        self.disputes: dict[str, dict[str, Any]] = {}
        self.failures: list[tuple[Callable[[str, dict[str, list[str]]], bool], int]] = []
        self.seen: list[tuple[str, str, dict[str, list[str]]]] = []  # (method, path, query)
        self.on_request: Callable[[str], None] | None = None
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy._handle(self, "GET")

            def do_POST(self) -> None:
                proxy._handle(self, "POST")

            def do_DELETE(self) -> None:
                proxy._handle(self, "DELETE")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(self, when: Callable[[str, dict[str, list[str]]], bool], status: int = 429) -> None:
        """Answer the next request ``when(path, query)`` picks with ``status``, once."""
        with self._lock:
            self.failures.append((when, status))

    def requests_to(self, path: str) -> list[dict[str, list[str]]]:
        return [query for _, seen_path, query in self.seen if seen_path == path]

    # --- serving -----------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        path, _, raw_query = handler.path.partition("?")
        query = parse_qs(raw_query, keep_blank_values=True)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        with self._lock:
            self.seen.append((method, path, query))
            failure = next((f for f in self.failures if f[0](path, query)), None)
            if failure is not None:
                self.failures.remove(failure)
        if self.on_request is not None:
            self.on_request(path)
        if failure is not None:
            error = {"error": {"type": "rate_limit_error", "message": "Too many requests"}}
            return self._answer(handler, failure[1], error)
        headers = {
            name: value
            for name, value in handler.headers.items()
            if name.lower()
            in ("authorization", "idempotency-key", "content-type", "stripe-version")
        }
        if method == "GET" and path == "/v1/balance_transactions":
            return self._answer(handler, 200, self._transactions(query, headers))
        if method == "GET" and path.startswith("/v1/disputes/"):
            dispute = self.disputes.get(path.rsplit("/", 1)[1])
            if dispute is None:
                return self._answer(handler, 404, {"error": {"type": "invalid_request_error"}})
            return self._answer(handler, 200, self._dispute(dispute, headers))
        answer = requests.request(
            method,
            f"{self.upstream}{path}",
            params=raw_query or None,
            data=body or None,
            headers=headers,
            timeout=10,
        )
        data = (
            answer.json()
            if answer.headers.get("Content-Type", "").startswith("application/json")
            else None
        )
        if data is not None and path.startswith("/v1/refunds"):
            data = self._refunds(data)
        if data is None:
            handler.send_response(answer.status_code)
            handler.send_header("Content-Length", str(len(answer.content)))
            handler.end_headers()
            handler.wfile.write(answer.content)
            return None
        return self._answer(handler, answer.status_code, data)

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, status: int, data: Any) -> None:
        payload = json.dumps(data).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def _refunds(self, data: Any) -> Any:
        """localstripe's refunds, with the fields a test gave (a refund that failed)."""
        if data.get("object") == "list":
            return {**data, "data": [self._refunds(item) for item in data["data"]]}
        return {**data, **self.refunds.get(data.get("id"), {})}

    def _transactions(self, query: dict[str, list[str]], headers: dict[str, str]) -> Any:
        """localstripe's balance transactions and the added ones, newest first, paged
        as Stripe pages them (``limit``, ``starting_after``)."""
        expand = [value for name, values in query.items() if "expand" in name for value in values]
        upstream: list[Any] = []
        after = None
        while True:
            params: list[tuple[str, str]] = [("limit", "100")]
            params += [(f"expand[{i}]", value) for i, value in enumerate(expand)]
            params += [("starting_after", after)] if after else []
            page = requests.get(
                f"{self.upstream}/v1/balance_transactions",
                params=params,
                headers=headers,
                timeout=10,
            ).json()
            upstream += page["data"]
            if not page.get("has_more"):
                break
            after = page["data"][-1]["id"]
        merged = sorted(upstream + self.transactions, key=lambda txn: txn["created"], reverse=True)
        start = 0
        if query.get("starting_after"):
            ids = [txn["id"] for txn in merged]
            start = ids.index(query["starting_after"][0]) + 1
        limit = int(query.get("limit", ["10"])[0])
        page = merged[start : start + limit]
        return {
            "object": "list",
            "url": "/v1/balance_transactions",
            "has_more": start + limit < len(merged),
            "data": page,
        }

    def _dispute(self, dispute: dict[str, Any], headers: dict[str, str]) -> Any:
        """The dispute, its PaymentIntent expanded as Stripe expands it when asked."""
        intent = dispute.get("payment_intent")
        if isinstance(intent, str):
            answer = requests.get(
                f"{self.upstream}/v1/payment_intents/{intent}", headers=headers, timeout=10
            )
            dispute = {**dispute, "payment_intent": answer.json()}
        return dispute
