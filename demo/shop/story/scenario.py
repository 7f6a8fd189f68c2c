"""Run the story's founding scenario like a real client, and record what happened, when.

The scenario is a list of steps (``CHAPTERS``). Each one sends its requests
through the project's client (``wire``, over HTTP) and records a ``Happening``
per request on the ``Scene`` (``scene.py``): who, what was sent, the answer,
and the second it was known. The second chapter (``late_success``) plays on
the same scene.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils.translation import gettext
from rest_framework.authtoken.models import Token

from demo.shop.answers import Answer
from demo.shop.story.report import StoryUnavailable
from demo.shop.story.scene import (
    Role,
    Scene,
    place_order,
    provider_calm,
    script_faults,
    short_key,
)
from demo.shop.story.wire import client
from onceshop_client import new_key

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


def pay_twice_then_gateway(scene: Scene) -> None:
    me = scene.as_customer()
    number = scene.order_number
    path = reverse("order-pay", kwargs={"number": number})
    key = scene.pay_key = new_key()
    request = f"POST {path} · Idempotency-Key {short_key(key)}"

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
