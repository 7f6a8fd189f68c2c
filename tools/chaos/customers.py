"""Customers: ``onceshop_client`` users that shop, pay, double-click and refund.

Each customer is a thread with its own user, its own clients and its own random
generator (derived from the run's seed). The key discipline is the client's:
one key per intent, the same key after no answer, a 5xx or a 409 in flight
(honouring ``Retry-After``, capped exponential backoff with full jitter), a
new key only for a new intent after a final answer. The customer only decides
what to do next, as a person at a keyboard would: that includes a payment the
provider holds for them (202 ``payment-action-required``, the sandbox's
``requires_action``), which they complete, abandon, or walk away from, as
people do with 3-D Secure; the first two send the pay again with its key, the
last leaves the attempt to the reconciler's fence (PAYMENT_ACTION_TIMEOUT_S).

Every exchange goes through ``Balancer``, which spreads requests over the two
shop servers (as a load balancer would) and writes each one to the history.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import requests
from requests.adapters import HTTPAdapter

from onceshop_client import GaveUp, Line, OnceShopClient, Problem, Reply, RetryPolicy, new_key
from tools.chaos.history import History

# What customers address: the balancer replaces it with one of the shop servers.
ENTRY = "http://shop.chaos"
# Patient customers: a restarted server or Redis is back within seconds, a pay
# whose outcome is unknown is settled by the reconciler within RECONCILE_AFTER_S.
POLICY = RetryPolicy(max_attempts=12, max_elapsed_s=90.0, base_s=0.25, cap_s=8.0)
# (connect, read): the read timeout is well above the provider's (2 s in the run),
# so the shop answers 503 before the customer stops waiting.
TIMEOUT = (3.0, 20.0)
# The pay answer that is not final: the provider waits for the customer.
ACTION_REQUIRED = 202
# What a customer does then: complete it, abandon it, or walk away (the rest).
COMPLETES, ABANDONS = 0.5, 0.25


class Balancer(HTTPAdapter):
    """A transport that picks a shop server per request and records the exchange."""

    def __init__(
        self, *, backends: Sequence[str], rng: random.Random, history: History, customer: str
    ) -> None:
        super().__init__()
        self.backends = list(backends)
        self.rng = rng
        self.history = history
        self.customer = customer

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> Any:
        backend = self.rng.choice(self.backends)
        assert request.url is not None
        path = request.url[len(ENTRY) :]
        request.url = backend + path
        event: dict[str, Any] = {
            "customer": self.customer,
            "method": request.method,
            "path": path,
            "key": request.headers.get("Idempotency-Key"),
            "server": backend,
        }
        try:
            response = super().send(request, *args, **kwargs)
            body = _json(response.content)
        except Exception as error:
            self.history.record("request", **event, error=type(error).__name__)
            raise
        self.history.record(
            "request",
            **event,
            status=response.status_code,
            code=body.get("code", "") if response.status_code >= 400 else "",
            number=body.get("number", ""),
            replayed=response.headers.get("Idempotent-Replayed") == "true",
            retry_after=response.headers.get("Retry-After", ""),
        )
        return response


def _json(content: bytes) -> Mapping[str, Any]:
    try:
        body = json.loads(content) if content else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


@dataclass
class Budget:
    """How many orders are left to start, shared by every customer, and until when."""

    orders: int
    deadline: float  # time.monotonic(); the chaos phase ends then even if orders are left

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.orders <= 0 or time.monotonic() > self.deadline:
                return False
            self.orders -= 1
            return True


@dataclass(frozen=True)
class Shelf:
    """The catalogue the customers buy from."""

    skus: list[str]


class Customer:
    """One user at a keyboard. ``run()`` shops until the budget is spent."""

    def __init__(
        self,
        *,
        username: str,
        token: str,
        backends: Sequence[str],
        seed: int,
        history: History,
        shelf: Shelf,
    ) -> None:
        self.username = username
        self.token = token
        self.backends = backends
        self.rng = random.Random(seed)
        self.history = history
        self.shelf = shelf
        self.shop = self._client()
        # Intents the client gave up on (GaveUp): (op, key, order, the call).
        self.unanswered: list[tuple[str, str, str | None, Callable[[], Reply[Any]]]] = []

    def _client(self) -> OnceShopClient:
        session = requests.Session()
        balancer = Balancer(
            backends=self.backends,
            rng=random.Random(self.rng.random()),
            history=self.history,
            customer=self.username,
        )
        session.mount(ENTRY, balancer)
        return OnceShopClient(
            ENTRY,
            token=self.token,
            policy=POLICY,
            timeout=TIMEOUT,
            rng=random.Random(self.rng.random()),
            session=session,
        )

    def run(self, budget: Budget) -> None:
        while budget.take():
            self.one_order()

    def come_back(self) -> None:
        """Send every intent the client gave up on again, with its key (GaveUp's advice:
        "come back later, same key"); whatever it had done is replayed, not redone."""
        pending, self.unanswered = self.unanswered, []
        for op, key, number, call in pending:
            self.intent(op, key, number, call)

    # --- one order, as a person would go about it -----------------------------------

    def one_order(self) -> None:
        skus = self.rng.sample(self.shelf.skus, self.rng.choice([1, 1, 2]))
        lines = [Line(sku=sku, quantity=self.rng.randint(1, 3)) for sku in skus]
        key = new_key()
        created = self.intent("create", key, None, lambda: self.shop.create_order(lines, key=key))
        if self.rng.random() < 0.1:  # a double click on "place order": a replay
            self.intent("create", key, None, lambda: self.shop.create_order(lines, key=key))
        if not isinstance(created, Reply):
            return
        number = created.body["number"]
        if self.rng.random() < 0.1:
            self.cancel(number)
            return
        for _ in range(3):  # a declined card: another try is another intent
            paid = self.pay(number)
            if isinstance(paid, Reply):
                if paid.status != ACTION_REQUIRED and self.rng.random() < 0.2:
                    self.refund(number, created.body["amount"])
                return
            if not (isinstance(paid, Problem) and paid.status == 402):
                return  # not payable (paid late, cancelled), or left to the reconciler
            if self.rng.random() < 0.4:
                self.cancel(number)
                return

    def pay(self, number: str) -> Reply[Any] | Problem | GaveUp:
        key = new_key()
        if self.rng.random() < 0.25:
            # A double click on "pay": two requests with one key at once, from
            # two connections (each thread its own client).
            second = self._client()
            other = threading.Thread(
                target=self.intent,
                args=("pay", key, number, lambda: second.pay(number, key=key)),
            )
            other.start()
            outcome = self.intent("pay", key, number, lambda: self.shop.pay(number, key=key))
            other.join()
        else:
            outcome = self.intent("pay", key, number, lambda: self.shop.pay(number, key=key))
        if isinstance(outcome, Reply) and outcome.status == ACTION_REQUIRED:
            return self.act_for_the_provider(number, key, outcome)
        return outcome

    def act_for_the_provider(
        self, number: str, key: str, asked: Reply[Any]
    ) -> Reply[Any] | Problem | GaveUp:
        """The provider waits for this customer: complete, abandon or walk away (the 202
        stays their last word; the reconciler fences the attempt after its time)."""
        draw = self.rng.random()
        if draw >= COMPLETES + ABANDONS:
            self.history.record("customer-action", customer=self.username, order=number, did="left")
            return asked
        result = "complete" if draw < COMPLETES else "abandon"
        action = asked.body.get("action") if isinstance(asked.body, dict) else None
        action = action or {}
        answered: int | str
        try:
            # At the provider's page (its API), not the shop's: no balancer in between.
            answered = requests.post(
                action["next_action"]["url"],
                json={"client_secret": action["client_secret"], "result": result},
                timeout=TIMEOUT,
            ).status_code
        except (requests.RequestException, KeyError, TypeError) as error:
            answered = type(error).__name__  # a killed provider: the same key tells
        self.history.record(
            "customer-action", customer=self.username, order=number, did=result, answer=answered
        )
        # Back at the shop with the same key: the payment, the decline, or 202 again.
        return self.intent("pay", key, number, lambda: self.shop.pay(number, key=key))

    def cancel(self, number: str) -> None:
        key = new_key()
        self.intent("cancel", key, number, lambda: self.shop.cancel(number, key=key))

    def refund(self, number: str, amount: int) -> None:
        key = new_key()
        part = self.rng.randint(1, amount) if self.rng.random() < 0.5 else None  # None: the rest
        self.intent(
            "refund",
            key,
            number,
            lambda: self.shop.refund(number, amount=part, reason="chaos", key=key),
        )

    def intent(
        self, op: str, key: str, number: str | None, call: Callable[[], Reply[Any]]
    ) -> Reply[Any] | Problem | GaveUp:
        """Run one intent and record what the customer was finally told."""
        event: dict[str, Any] = {"customer": self.username, "op": op, "key": key, "order": number}
        try:
            reply = call()
        except Problem as final:
            self.history.record(
                "intent",
                **event,
                outcome="fail",
                status=final.status,
                code=final.code,
                replayed=final.replayed,
            )
            return final
        except GaveUp as later:
            last = later.last_reply
            self.history.record(
                "intent",
                **event,
                outcome="info",
                status=last.status if last else None,
                error=type(later.last_error).__name__ if later.last_error else None,
                attempts=later.attempts,
            )
            self.unanswered.append((op, key, number, call))
            return later
        body = reply.body if isinstance(reply.body, dict) else {}
        if reply.status == ACTION_REQUIRED:
            # Not an answer yet: the provider waits for the customer (not final, not stored).
            self.history.record("intent", **event, outcome="info", status=reply.status)
            return reply
        self.history.record(
            "intent",
            **event,
            outcome="ok",
            status=reply.status,
            replayed=reply.replayed,
            attempts=reply.attempts,
            number=body.get("number"),
            order_status=body.get("status"),
            amount=body.get("amount"),
            refunded_amount=body.get("refunded_amount", 0),
        )
        return reply
