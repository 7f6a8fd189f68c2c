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
- it returns ``latest_charge`` expanded whether asked or not.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

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
