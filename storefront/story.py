"""The guided story: the reading's founding scenario, replayed against the running shop.

    The customer clicks Pay; the page spins, so they click again. The gateway,
    whose first request timed out, retries it three seconds later. The
    provider's callback arrives (three times). The first charge had in fact
    succeeded. Three triggers, one order: one order, one debit, one shipment.

It is driven like a real client: over HTTP against ``SHOP_BASE_URL`` (the
running demo), with a fresh customer's token, the provider scripted through its
faults API (``timeout_after_commit`` + ``callback_duplicates`` with 3 copies).
Only the narration reads the shop's database: to show the notification and
the shipment that background work produced, and the books at the end.

``story_run`` returns structured steps, so ``manage.py story``, the home
page's button and the tests share one implementation.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token

from callbacks.models import ProviderNotification
from orders.models import Order, Shipment
from payments.models import LedgerEntry, Payment
from payments.providers.sandbox import SandboxProvider
from reconcile.audit import audit_run
from storefront.answers import Answer
from storefront.client import ShopClient, ShopUnreachable

# "The gateway retries the request three seconds later" (the reading).
GATEWAY_DELAY_S = 3.0
# How long the story waits for background work (notifications, fulfilment) before
# saying it has not happened yet. The worker normally does both within a second.
BACKGROUND_WAIT_S = 30.0
# The provider answers this much later than the shop waits: certainly a timeout.
PROVIDER_LATE_BY_S = 2.0
# The scripted provider delay is capped by the sandbox (a fault delays at most 60 s).
SANDBOX_MAX_DELAY_S = 60.0
POLL_S = 0.05


class StoryUnavailable(Exception):
    """The story cannot run (shop unreachable, not seeded, ...); the message says why."""


@dataclass(frozen=True)
class StoryStep:
    actor: str
    action: str
    request: str
    answer: Answer | None  # set for the requests that carry an Idempotency-Key
    result: str
    why: str  # the story's reason; the answer's own explanation is ``answer.why``
    at_s: float  # seconds after the story started, when the result was known

    @property
    def explanation(self) -> str:
        return f"{self.why} {self.answer.why}" if self.answer is not None else self.why


@dataclass(frozen=True)
class TallyRow:
    what: str
    count: int
    expected: int

    @property
    def ok(self) -> bool:
        return self.count == self.expected


@dataclass
class StoryReport:
    customer: str
    order_number: str = ""
    steps: list[StoryStep] = field(default_factory=list)
    tally: list[TallyRow] = field(default_factory=list)
    audit: Any | None = None
    audit_note: str = ""

    @property
    def ok(self) -> bool:
        audit_ok = self.audit is None or bool(getattr(self.audit, "ok", False))
        return bool(self.tally) and all(row.ok for row in self.tally) and audit_ok


def _short(key: str) -> str:
    return f"{key[:8]}…"


class _Story:
    def __init__(
        self,
        *,
        base_url: str,
        provider_url: str,
        operator: str,
        gateway_delay_s: float,
        wait_s: float,
        on_step: Callable[[StoryStep], None] | None,
    ) -> None:
        self.base_url = base_url
        self.provider_url = provider_url
        self.operator = operator
        self.gateway_delay_s = gateway_delay_s
        self.wait_s = wait_s
        self.on_step = on_step
        self.started = time.monotonic()
        # Wall clock too: rows written by the server (a notification's received_at)
        # are placed on the story's time line by it. Same machine, same clock.
        self.started_wall = timezone.now()
        self.report = StoryReport(customer="")

    # --- helpers -----------------------------------------------------------------

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 2)

    def step(
        self,
        actor: str,
        action: str,
        request: str,
        answer: Answer | None,
        why: str,
        *,
        result: str | None = None,
        at_s: float | None = None,
    ) -> StoryStep:
        done = StoryStep(
            actor=actor,
            action=action,
            request=request,
            answer=answer,
            result=result if result is not None else (answer.summary if answer else ""),
            why=why,
            at_s=self.elapsed() if at_s is None else at_s,
        )
        self.report.steps.append(done)
        if self.on_step is not None:
            self.on_step(done)
        return done

    def wait_for(self, found: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + self.wait_s
        while not found():
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S * 4)
        return True

    # --- the scenario ------------------------------------------------------------------

    def run(self) -> StoryReport:
        shop = ShopClient(base_url=self.base_url)
        product = self.pick_product(shop)
        operator = self.operator_client()
        customer, password = self.new_customer()
        self.report.customer = customer

        signed_in = shop.post(
            reverse("auth-token"), json={"username": customer, "password": password}
        )
        if not signed_in.ok:
            raise StoryUnavailable(f"The new customer could not sign in: {signed_in.summary}.")
        self.step(
            "customer",
            f"{customer}, a new customer, signs in",
            f"POST {reverse('auth-token')}",
            None,
            "A fresh user, so the books at the end show only what this story did.",
            result=f"{signed_in.status} token issued",
        )
        me = ShopClient(base_url=self.base_url, token=str(signed_in.body["token"]))

        order_key = str(uuid.uuid4())
        created = me.post(
            reverse("order-list"),
            key=order_key,
            json={"lines": [{"sku": product["sku"], "quantity": 1}]},
        )
        self.step(
            "customer",
            f"places an order for 1 x {product['name']}",
            f"POST {reverse('order-list')} · Idempotency-Key {_short(order_key)}",
            created,
            "The checkout generated one key for this checkout intent.",
        )
        if created.status != 201:
            raise StoryUnavailable(f"The order was not created: {created.summary}.")
        number = str(created.body["number"])
        self.report.order_number = number

        self.script_provider(operator)
        try:
            self.pay_twice_then_gateway(me, number)
        finally:
            operator.request("DELETE", "/v1/faults")  # leave the provider well-behaved
        self.background(number)
        self.books(customer, number)
        return self.report

    def pick_product(self, shop: ShopClient) -> dict[str, Any]:
        try:
            listed = shop.get(reverse("product-list") + "?page_size=100")
        except ShopUnreachable as error:
            raise StoryUnavailable(str(error)) from error
        if not listed.ok or not isinstance(listed.body, dict):
            raise StoryUnavailable(
                f"{self.base_url} answered {listed.status} for the catalogue: is OnceShop "
                "running there?"
            )
        wallet_start = settings.SANDBOX_WALLET_START
        products = [
            p
            for p in listed.body.get("results", [])
            if p["stock"] > 0 and p["price"] <= wallet_start
        ]
        if not products:
            raise StoryUnavailable("Nothing is in stock: run `python manage.py seed_demo`.")
        return min(products, key=lambda p: (p["price"], p["sku"]))

    def operator_client(self) -> ShopClient:
        user = get_user_model().objects.filter(username=self.operator, is_staff=True).first()
        if user is None:
            raise StoryUnavailable(
                f"There is no staff user '{self.operator}' to script the provider's faults: "
                "run `python manage.py seed_demo` (make demo does)."
            )
        token, _ = Token.objects.get_or_create(user=user)
        return ShopClient(base_url=self.provider_url, token=token.key)

    def new_customer(self) -> tuple[str, str]:
        username = f"story-{secrets.token_hex(4)}"
        password = secrets.token_urlsafe(16)
        get_user_model().objects.create_user(username=username, password=password)
        return username, password

    def script_provider(self, operator: ShopClient) -> None:
        delay = min(settings.PROVIDER_TIMEOUT_S + PROVIDER_LATE_BY_S, SANDBOX_MAX_DELAY_S)
        cleared = operator.request("DELETE", "/v1/faults")
        late = operator.post(
            "/v1/faults", json={"mode": "timeout_after_commit", "count": 1, "delay_s": delay}
        )
        copies = operator.post(
            "/v1/faults", json={"mode": "callback_duplicates", "count": 1, "copies": 3}
        )
        answers = [cleared, late, copies]
        if not all(answer.ok for answer in answers):
            failed = next(answer for answer in answers if not answer.ok)
            raise StoryUnavailable(f"The provider's faults could not be set: {failed.summary}.")
        self.step(
            "operator",
            "scripts the provider for the next charge",
            "POST /sandbox/v1/faults timeout_after_commit, callback_duplicates x3",
            None,
            f"The provider will charge, then answer after {delay:.1f} s, later than the "
            f"shop waits ({settings.PROVIDER_TIMEOUT_S:.1f} s); and it will send its "
            "notification 3 times.",
            result=f"{late.status} armed",
        )

    def pay_twice_then_gateway(self, me: ShopClient, number: str) -> None:
        pay_path = reverse("order-pay", kwargs={"number": number})
        key = str(uuid.uuid4())
        request = f"POST {pay_path} · Idempotency-Key {_short(key)}"

        first: dict[str, Any] = {}
        sent_at = self.elapsed()

        def click() -> None:
            first["answer"] = me.post(pay_path, key=key)
            first["at"] = self.elapsed()

        clicking = threading.Thread(target=click, name="story-first-click")
        clicking.start()
        # The page spins: wait until the shop holds the key (it is asking the provider),
        # seen the way any client can, through GET /api/v1/idempotency-keys/{key}/.
        status_path = reverse("idempotency-key-detail", kwargs={"key": key})
        deadline = time.monotonic() + settings.PROVIDER_TIMEOUT_S + 10
        while clicking.is_alive() and time.monotonic() < deadline:
            seen = me.get(status_path)
            if seen.ok and seen.body.get("status") == "in_progress":
                break
            time.sleep(POLL_S)
        second = me.post(pay_path, key=key)
        second_at = self.elapsed()
        clicking.join()

        unknown: Answer = first["answer"]
        self.step(
            "customer",
            "clicks Pay",
            request,
            unknown,
            f"Sent at {sent_at:.1f} s. The page made one key for this pay intent. " + unknown.why,
            at_s=first["at"],
        )
        self.step(
            "customer",
            "clicks Pay again while the page spins (a double click)",
            request,
            second,
            "The page kept the key, so the second click is the same request, not a new one.",
            at_s=second_at,
        )

        time.sleep(self.gateway_delay_s)
        retried = me.post(pay_path, key=key)
        self.step(
            "gateway",
            f"retries the timed-out request {self.gateway_delay_s:g} s later, same key",
            request,
            retried,
            "The key's record waited at its recovery point (payment created, outcome "
            "unknown). The retry resumed there: it asked the provider about the attempt, "
            "found the charge that had succeeded, and settled it. No second charge. " + retried.why,
        )
        again = me.post(pay_path, key=key)
        self.step(
            "customer",
            "reloads the page, which resends the same key",
            request,
            again,
            "The page keeps the key until an answer is final.",
        )

    def background(self, number: str) -> None:
        payment = Payment.objects.filter(order__number=number, status="SUCCEEDED").first()
        if payment is None:
            self.step("provider", "sends its notification", "", None, "No payment succeeded.")
        else:
            received = ProviderNotification.objects.filter(out_trade_no=payment.out_trade_no)
            if self.wait_for(received.exists):
                note = received.order_by("received_at").first()
                assert note is not None
                applied = note.outcome == "applied"
                self.step(
                    "provider",
                    "sends its notification 3 times (one notify_id)",
                    "POST /api/v1/callbacks/sandbox/ x3",
                    None,
                    (
                        "It arrived while the shop was still waiting on the provider, and "
                        "settled the payment first; the retries then found it settled."
                        if applied
                        else "The payment was already settled the same way, so it changed nothing."
                    )
                    + " Its notify_id is unique in the shop's table: every copy after the "
                    "first finds that row and gets the same answer back.",
                    result=f"{note.outcome}, answered {note.response_status}",
                    at_s=round((note.received_at - self.started_wall).total_seconds(), 2),
                )
            else:
                self.step(
                    "provider",
                    "sends its notification 3 times",
                    "POST /api/v1/callbacks/sandbox/ x3",
                    None,
                    f"Nothing arrived within {self.wait_s:g} s: is the worker running? Nothing "
                    "depends on it: the payment is settled already.",
                    result="not received yet",
                )
        shipped = Shipment.objects.filter(order__number=number)
        arrived = self.wait_for(shipped.exists)
        self.step(
            "shop",
            "fulfils the order",
            "Celery task fulfil_order, enqueued on commit",
            None,
            "One shipment per order by a unique index: however often the message is "
            "delivered, it ships once."
            if arrived
            else f"No shipment within {self.wait_s:g} s: is the worker running?",
            result="shipped once" if arrived else "not shipped yet",
        )

    def books(self, customer: str, number: str) -> None:
        order = Order.objects.get(number=number)
        wallet = ShopClient(
            base_url=self.provider_url,
            token=None,
        ).request(
            "GET",
            f"/v1/wallets/{customer}",
            headers={"Authorization": f"Bearer {settings.PROVIDER_API_KEY}"},
        )
        charges = wallet.body.get("charges", []) if wallet.ok and wallet.body else []
        self.report.tally = [
            TallyRow("orders", Order.objects.filter(user__username=customer).count(), 1),
            TallyRow("paid orders", Order.objects.filter(pk=order.pk, status="PAID").count(), 1),
            TallyRow("ledger entries (debits)", LedgerEntry.objects.filter(order=order).count(), 1),
            TallyRow(
                "successful charges at the provider",
                sum(1 for charge in charges if charge["status"] == "SUCCESS"),
                1,
            ),
            TallyRow("shipments", Shipment.objects.filter(order=order).count(), 1),
        ]
        # The audit reads the provider at the story's provider URL: with the demo on
        # another PORT, this process's PROVIDER_BASE_URL default points elsewhere.
        provider = SandboxProvider(
            base_url=self.provider_url,
            api_key=settings.PROVIDER_API_KEY,
            timeout_s=settings.PROVIDER_TIMEOUT_S,
            webhook_secrets=[],  # the audit only reads; it verifies no notification
        )
        try:
            self.report.audit = audit_run(provider=provider)
        except Exception as error:  # said in words; the tally above still stands
            self.report.audit_note = f"The audit could not run: {type(error).__name__}."


def story_run(
    *,
    base_url: str | None = None,
    provider_url: str | None = None,
    operator: str = "staff",
    gateway_delay_s: float = GATEWAY_DELAY_S,
    wait_s: float = BACKGROUND_WAIT_S,
    on_step: Callable[[StoryStep], None] | None = None,
) -> StoryReport:
    """Replay the founding scenario on a fresh customer; raise StoryUnavailable if it cannot.

    ``provider_url`` defaults to ``PROVIDER_BASE_URL``, the provider the shop itself
    pays through: the sandbox is served by its own process (``SANDBOX_ENABLED``),
    never by the shop, so it is not under ``base_url``.
    """
    shop = (base_url or settings.SHOP_BASE_URL).rstrip("/")
    story = _Story(
        base_url=shop,
        provider_url=(provider_url or settings.PROVIDER_BASE_URL).rstrip("/"),
        operator=operator,
        gateway_delay_s=gateway_delay_s,
        wait_s=wait_s,
        on_step=on_step,
    )
    try:
        return story.run()
    except ShopUnreachable as error:
        raise StoryUnavailable(str(error)) from error
