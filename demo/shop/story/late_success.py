"""Chapter two: the provider succeeds late, after the shop gave up.

    The customer orders again and pays. The provider declines now, as an
    asynchronous method does while the payer has not confirmed. The customer
    gives up and cancels the order. Seconds later the payer confirms after all:
    the provider captures the money and notifies the shop. The order cannot
    take it any more, so the shop books it as an orphaned capture and refunds
    it automatically; the customer is out of pocket for nothing.

This module sends the customer's requests (through the project's client, with
its own retry policy: a 402 is final, never retried). ``late_observe`` then
reads what the provider, the shop and the reconciler did, from their rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import reverse
from django.utils.translation import gettext

from demo.shop.story.report import StoryUnavailable
from demo.shop.story.scene import Role, Scene, place_order, provider_calm, script_faults
from demo.shop.story.wire import client, send
from onceshop_client import RetryPolicy

# The payer confirms this long after the decline: long enough for the customer to
# have given up (cancelled) first, short enough for the story to wait for it.
LATE_BY_S = 2.0
# The client's defaults, as any user of it gets them.
CLIENT_DEFAULTS = RetryPolicy()


@dataclass(frozen=True)
class LateAttempt:
    """What the second chapter made: the order the customer gave up, and its attempt."""

    order_number: str
    out_trade_no: str


def late_success_run(scene: Scene) -> LateAttempt:
    try:
        armed = script_faults(scene, {"mode": "late_success", "count": 1, "delay_s": LATE_BY_S})
        scene.record(
            Role.SCRIPT,
            "operator",
            gettext("scripts the provider for the next charge"),
            request="POST /sandbox/v1/faults late_success",
            result=gettext("%(status)s armed") % {"status": armed.status},
            why=gettext(
                "The provider will decline the charge now and capture it %(seconds)s s later, "
                "as an asynchronous payment method does when the payer confirms late."
            )
            % {"seconds": f"{LATE_BY_S:g}"},
        )
        number = place_order(scene)
        _pay_declined(scene, number)
        out_trade_no = _attempt_of(scene, number)
        _give_up(scene, number)
    finally:
        provider_calm(scene)
    return LateAttempt(order_number=number, out_trade_no=out_trade_no)


def _pay_declined(scene: Scene, number: str) -> None:
    # The client's own policy this time: it would retry a 503 with the same key;
    # a 402 is final for its key, so it comes back after one attempt.
    me = client(scene.base_url, token=scene.token, policy=CLIENT_DEFAULTS)
    paid = scene.ask(lambda: me.pay(number))
    scene.record(
        Role.LATE_PAY,
        "customer",
        gettext("pays the new order (the client's default retry policy)"),
        request=f"POST {reverse('order-pay', kwargs={'number': number})} · " + gettext("a new key"),
        answer=paid,
        why=gettext(
            "A final answer: the client retries only what is not settled yet (no answer, "
            "a 5xx, a 409 in use), never another 4xx."
        ),
    )
    if paid.status != 402:
        raise StoryUnavailable(
            gettext("The provider was to decline this charge: %(answer)s.")
            % {"answer": paid.summary}
        )


def _attempt_of(scene: Scene, number: str) -> str:
    """The attempt's out_trade_no, read as any client can: GET the order."""
    me = client(scene.base_url, token=scene.token)
    order = scene.ask(lambda: me.order(number))
    payments = order.body.get("payments", []) if order.ok else []
    if not payments:
        raise StoryUnavailable(
            gettext("The declined order shows no payment attempt: %(answer)s.")
            % {"answer": order.summary}
        )
    return str(payments[-1]["out_trade_no"])


def _give_up(scene: Scene, number: str) -> None:
    me = client(scene.base_url, token=scene.token, policy=CLIENT_DEFAULTS)
    cancelled = send(lambda: me.cancel(number), who="shop", where=scene.base_url)
    status = cancelled.body.get("status", "") if cancelled.ok else ""
    scene.record(
        Role.GIVE_UP,
        "customer",
        gettext("gives up and cancels the order"),
        request=f"POST {reverse('order-cancel', kwargs={'number': number})} · "
        + gettext("a new key"),
        answer=cancelled,
        why=gettext("The order is %(status)s: its stock is released, exactly once.")
        % {"status": status},
    )
    if status != "CANCELLED":
        raise StoryUnavailable(
            gettext("The declined order could not be cancelled: %(answer)s.")
            % {"answer": cancelled.summary}
        )
