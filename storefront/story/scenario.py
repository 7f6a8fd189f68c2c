"""Run the story's founding scenario like a real client, and record what happened, when.

The scenario is a list of steps (``CHAPTERS``). Each one sends its requests
through the project's client (``wire``, over HTTP) and records a ``Happening``
per request: who, what was sent, the answer, and the second it was known. The
narrator later sorts them all, with what the background work did, into one
time line. Another chapter (``late_success``) builds on the same ``Scene``.
"""

from __future__ import annotations

import enum
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext
from rest_framework.authtoken.models import Token

from onceshop_client import Line, OnceShopClient, Reply
from storefront.answers import Answer
from storefront.story.report import StoryUnavailable
from storefront.story.wire import client, send

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


class Role(enum.Enum):
    """What a happening was, so the narrator can tell it in the light of the others."""

    SIGN_IN = "sign-in"
    ORDER = "order"
    SCRIPT = "script"
    CLICK = "click"  # the first click, when it was sent
    DOUBLE_CLICK = "double-click"
    CLICK_ANSWER = "click-answer"  # the first click's answer, when it came back
    GATEWAY_RETRY = "gateway-retry"
    RELOAD = "reload"
    NOTIFICATION = "notification"  # observed: the provider's notification arrived
    SETTLED = "settled"  # observed: the payment was settled
    SHIPPED = "shipped"  # observed: the order was fulfilled
    # The second chapter (late_success.py): the provider succeeds after the shop gave up.
    LATE_PAY = "late-pay"  # the pay the provider declines now
    GIVE_UP = "give-up"  # the customer cancels the order
    LATE_CAPTURE = "late-capture"  # observed: the provider captured after all
    LATE_NOTIFICATION = "late-notification"  # observed: the shop heard of it
    ORPHAN_BOOKED = "orphan-booked"  # observed: the capture booked as orphaned
    ORPHAN_REFUNDED = "orphan-refunded"  # observed: its automatic refund settled


@dataclass(frozen=True)
class Happening:
    at_s: float  # seconds after the story started
    role: Role
    actor: str
    action: str
    request: str = ""
    answer: Answer | None = None
    result: str = ""
    why: str = ""


@dataclass
class Scene:
    """The story's settings, and what its chapters have done so far."""

    base_url: str
    provider_url: str
    operator: str
    gateway_delay_s: float
    wait_s: float
    # Wall clock, not monotonic: rows the server wrote (a notification's received_at)
    # are placed on the same time line. Same machine, same clock.
    started: datetime = field(default_factory=timezone.now)
    customer: str = ""
    order_number: str = ""
    pay_key: str = ""
    product: dict[str, Any] = field(default_factory=dict)
    token: str = ""  # the customer's API token
    operator_token: str = ""  # the staff user's, for the provider's faults API
    happenings: list[Happening] = field(default_factory=list)

    def seconds(self, at: datetime | None = None) -> float:
        return round(((at or timezone.now()) - self.started).total_seconds(), 2)

    def record(
        self,
        role: Role,
        actor: str,
        action: str,
        *,
        request: str = "",
        answer: Answer | None = None,
        result: str = "",
        why: str = "",
        at_s: float | None = None,
    ) -> None:
        self.happenings.append(
            Happening(
                at_s=self.seconds() if at_s is None else at_s,
                role=role,
                actor=actor,
                action=action,
                request=request,
                answer=answer,
                result=result or (answer.summary if answer is not None else ""),
                why=why,
            )
        )

    def as_customer(self) -> OnceShopClient:
        """A new client of the shop as the customer: one per thread."""
        assert self.token, "sign_in runs first"
        return client(self.base_url, token=self.token)

    def ask(self, call: Callable[[], Reply[Any]]) -> Answer:
        """One call of the shop through the client; its answer, final or not."""
        return send(call, who="shop", where=self.base_url)

    def to_provider(self, method: str, path: str, body: Any = None) -> Answer:
        """One call of the provider's API as the staff operator (its faults)."""
        provider = client(self.provider_url, token=self.operator_token)
        return send(
            lambda: provider.send(method, path, json=body), who="provider", where=self.provider_url
        )


def _short(key: str) -> str:
    return f"{key[:8]}…"


# --- the chapters -----------------------------------------------------------------------


def sign_in(scene: Scene) -> None:
    scene.product = _pick_product(scene)
    scene.operator_token = _operator_token(scene)
    username, password = f"story-{secrets.token_hex(4)}", secrets.token_urlsafe(16)
    get_user_model().objects.create_user(username=username, password=password)
    scene.customer = username
    path = reverse("auth-token")
    visitor = client(scene.base_url)
    form = {"username": username, "password": password}
    signed_in = scene.ask(lambda: visitor.send("POST", path, form=form))
    if not signed_in.ok:
        raise StoryUnavailable(
            gettext("The new customer could not sign in: %(answer)s.")
            % {"answer": signed_in.summary}
        )
    scene.token = str(signed_in.body["token"])
    scene.record(
        Role.SIGN_IN,
        "customer",
        gettext("%(username)s, a new customer, signs in") % {"username": username},
        request=f"POST {path}",
        result=gettext("%(status)s token issued") % {"status": signed_in.status},
        why=gettext("A fresh user, so the books at the end show only what this story did."),
    )


def place_order(scene: Scene) -> str:
    """One order of the cheapest product in stock; its number. Used by both chapters."""
    key = str(uuid.uuid4())
    product = scene.product
    lines: list[Line] = [{"sku": product["sku"], "quantity": 1}]
    me = scene.as_customer()
    created = scene.ask(lambda: me.create_order(lines, key=key))
    scene.record(
        Role.ORDER,
        "customer",
        gettext("places an order for 1 x %(product)s") % {"product": product["name"]},
        request=f"POST {reverse('order-list')} · Idempotency-Key {_short(key)}",
        answer=created,
        why=gettext("The checkout generated one key for this checkout intent."),
    )
    if created.status != 201:
        raise StoryUnavailable(
            gettext("The order was not created: %(answer)s.") % {"answer": created.summary}
        )
    return str(created.body["number"])


def first_order(scene: Scene) -> None:
    scene.order_number = place_order(scene)


def script_provider(scene: Scene) -> None:
    delay = min(settings.PROVIDER_TIMEOUT_S + PROVIDER_LATE_BY_S, SANDBOX_MAX_DELAY_S)
    armed = script_faults(
        scene,
        {"mode": "timeout_after_commit", "count": 1, "delay_s": delay},
        {"mode": "callback_duplicates", "count": 1, "copies": 3},
    )
    scene.record(
        Role.SCRIPT,
        "operator",
        gettext("scripts the provider for the next charge"),
        request="POST /sandbox/v1/faults timeout_after_commit, callback_duplicates x3",
        result=gettext("%(status)s armed") % {"status": armed.status},
        why=gettext(
            "The provider will charge, then answer after %(delay)s s, later than the shop "
            "waits (%(timeout)s s); and it will send its notification 3 times."
        )
        % {"delay": f"{delay:.1f}", "timeout": f"{settings.PROVIDER_TIMEOUT_S:.1f}"},
    )


def script_faults(scene: Scene, *faults: dict[str, Any]) -> Answer:
    """Clear the provider's faults, then arm these; the last answer."""
    answers = [scene.to_provider("DELETE", "/v1/faults")]
    answers += [scene.to_provider("POST", "/v1/faults", fault) for fault in faults]
    failed = next((answer for answer in answers if not answer.ok), None)
    if failed is not None:
        raise StoryUnavailable(
            gettext("The provider's faults could not be set: %(answer)s.")
            % {"answer": failed.summary}
        )
    return answers[-1]


def pay_twice_then_gateway(scene: Scene) -> None:
    me = scene.as_customer()
    number = scene.order_number
    path = reverse("order-pay", kwargs={"number": number})
    key = scene.pay_key = str(uuid.uuid4())
    request = f"POST {path} · Idempotency-Key {_short(key)}"

    first: list[Answer] = []
    # Its own client: the first click waits in another thread.
    first_click = scene.as_customer()
    clicking = threading.Thread(
        target=lambda: first.append(scene.ask(lambda: first_click.pay(number, key=key))),
        name="story-first-click",
    )
    scene.record(
        Role.CLICK, "customer", gettext("clicks Pay"), request=request, result=gettext("sent")
    )
    clicking.start()
    # The page spins: wait until the shop holds the key (it is asking the provider),
    # seen the way any client can, through GET /api/v1/idempotency-keys/{key}/.
    status_path = reverse("idempotency-key-detail", kwargs={"key": key})
    deadline = time.monotonic() + settings.PROVIDER_TIMEOUT_S + 10
    while clicking.is_alive() and time.monotonic() < deadline:
        seen = scene.ask(lambda: me.send("GET", status_path))
        if seen.ok and seen.body.get("status") == "in_progress":
            break
        time.sleep(POLL_S)
    second = scene.ask(lambda: me.pay(number, key=key))
    scene.record(
        Role.DOUBLE_CLICK,
        "customer",
        gettext("clicks Pay again while the page spins (a double click)"),
        request=request,
        answer=second,
    )
    clicking.join()
    scene.record(
        Role.CLICK_ANSWER,
        "shop",
        gettext("answers the first click"),
        request=request,
        answer=first[0],
    )
    time.sleep(scene.gateway_delay_s)  # the reading's gateway: a fixed, scripted pause
    retried = scene.ask(lambda: me.pay(number, key=key))
    scene.record(
        Role.GATEWAY_RETRY,
        "gateway",
        gettext("retries the timed-out request %(seconds)s s later, same key")
        % {"seconds": f"{scene.gateway_delay_s:g}"},
        request=request,
        answer=retried,
    )
    again = scene.ask(lambda: me.pay(number, key=key))
    scene.record(
        Role.RELOAD,
        "customer",
        gettext("reloads the page, which resends the same key"),
        request=request,
        answer=again,
        why=gettext("The page keeps the key until an answer is final."),
    )


Chapter = Callable[[Scene], None]
CHAPTERS: tuple[Chapter, ...] = (sign_in, first_order, script_provider, pay_twice_then_gateway)


def scenario_run(scene: Scene) -> None:
    try:
        for chapter in CHAPTERS:
            chapter(scene)
    finally:
        provider_calm(scene)


def provider_calm(scene: Scene) -> None:
    """Leave the provider well-behaved (no fault armed), if the story got that far."""
    if scene.operator_token:
        scene.to_provider("DELETE", "/v1/faults")


# --- what the chapters need ---------------------------------------------------------------


def _pick_product(scene: Scene) -> dict[str, Any]:
    path = reverse("product-list") + "?page_size=100"
    visitor = client(scene.base_url)
    listed = scene.ask(lambda: visitor.send("GET", path))
    if not listed.ok or not isinstance(listed.body, dict):
        raise StoryUnavailable(
            gettext("%(url)s answered %(status)s for the catalogue: is OnceShop running there?")
            % {"url": scene.base_url, "status": listed.status}
        )
    products = [
        p
        for p in listed.body.get("results", [])
        if p["stock"] > 1 and p["price"] <= settings.SANDBOX_WALLET_START // 2
    ]
    if not products:
        raise StoryUnavailable(
            gettext("Nothing is in stock: run `.venv/bin/python manage.py seed_demo`.")
        )
    return min(products, key=lambda p: (p["price"], p["sku"]))


def _operator_token(scene: Scene) -> str:
    user = get_user_model().objects.filter(username=scene.operator, is_staff=True).first()
    if user is None:
        raise StoryUnavailable(
            gettext(
                "There is no staff user '%(user)s' to script the provider's faults: run "
                "`.venv/bin/python manage.py seed_demo` (make demo does)."
            )
            % {"user": scene.operator}
        )
    token, _ = Token.objects.get_or_create(user=user)
    return str(token.key)
