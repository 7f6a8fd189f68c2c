"""The story's stage: who did what when (``Happening``), and what the chapters share.

A ``Scene`` holds the story's settings and everything its chapters did so far;
each request a chapter sends is recorded as a ``Happening`` with the second it
was known, so the narrator can tell all of them, and what the background work
did, in one time line. The actions here are used by both chapters.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop

from demo.shop.answers import Answer
from demo.shop.story.report import StoryUnavailable
from demo.shop.story.wire import client, send
from onceshop_client import Line, OnceShopClient, Reply, new_key
from payments.providers import TakesScriptedFaults, get_provider


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


# Said before the story does anything (no customer, no order): it plays the provider's
# faults, and only a stand-in provider takes them.
NO_SCRIPTED_FAULTS = gettext_noop(
    "The story cannot run in this demo: it scripts the provider's faults (a timeout after "
    "the charge, duplicated notifications, a late success), and this demo's payment provider "
    "takes no scripted faults. Run it beside `make demo`, whose sandbox provider does."
)


def story_runnable() -> bool:
    """Whether the provider the shop pays through takes the story's scripted faults."""
    return isinstance(get_provider(), TakesScriptedFaults)


def story_faults_path() -> str:
    """Where the provider's faults are scripted; StoryUnavailable if it takes none."""
    provider = get_provider()
    if not isinstance(provider, TakesScriptedFaults):
        raise StoryUnavailable(gettext(NO_SCRIPTED_FAULTS))
    return provider.faults_path


@dataclass
class Scene:
    """The story's settings, and what its chapters have done so far."""

    base_url: str
    provider_url: str
    faults_path: str  # under provider_url (TakesScriptedFaults)
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


def short_key(key: str) -> str:
    return f"{key[:8]}…"


def place_order(scene: Scene) -> str:
    """One order of the cheapest product in stock; its number. Used by both chapters."""
    key = new_key()
    product = scene.product
    lines: list[Line] = [{"sku": product["sku"], "quantity": 1}]
    me = scene.as_customer()
    created = scene.ask(lambda: me.create_order(lines, key=key))
    scene.record(
        Role.ORDER,
        "customer",
        gettext("places an order for 1 x %(product)s") % {"product": product["name"]},
        request=f"POST {reverse('order-list')} · Idempotency-Key {short_key(key)}",
        answer=created,
        why=gettext("The checkout generated one key for this checkout intent."),
    )
    if created.status != 201:
        raise StoryUnavailable(
            gettext("The order was not created: %(answer)s.") % {"answer": created.summary}
        )
    return str(created.body["number"])


def script_faults(scene: Scene, *faults: dict[str, Any]) -> Answer:
    """Clear the provider's faults, then arm these; the last answer."""
    answers = [scene.to_provider("DELETE", scene.faults_path)]
    answers += [scene.to_provider("POST", scene.faults_path, fault) for fault in faults]
    failed = next((answer for answer in answers if not answer.ok), None)
    if failed is not None:
        raise StoryUnavailable(
            gettext("The provider's faults could not be set: %(answer)s.")
            % {"answer": failed.summary}
        )
    return answers[-1]


def provider_calm(scene: Scene) -> None:
    """Leave the provider well-behaved (no fault armed), if the story got that far."""
    if scene.operator_token:
        scene.to_provider("DELETE", scene.faults_path)
