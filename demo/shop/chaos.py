"""The chaos panel's actions: script the provider, repeat requests, kill the worker.

Each action is something that happens to real systems on a bad day, and each
comes with one line saying what should happen (``FAULT_MODES`` and the
``*_WHAT_SHOULD_HAPPEN`` texts), so a person can check the shop against it.
"""

from __future__ import annotations

import collections
import os
import signal
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.urls import reverse
from django.utils.translation import gettext, gettext_noop
from rest_framework.authtoken.models import Token

from demo import runner as demo
from demo.sandbox.models import Fault
from demo.sandbox.services import fault_clear, fault_set
from demo.shop.answers import Answer
from demo.shop.client import ShopClient
from demo.shop.errors import ChaosUnavailable
from demo.shop.selectors import product_cheapest_in_stock
from orders.models import Order
from payments.providers import TakesScriptedFaults, get_provider


@dataclass(frozen=True)
class FaultMode:
    mode: str
    label: str
    what_should_happen: str
    takes_delay: bool = False
    takes_copies: bool = False


FAULT_MODES = (
    FaultMode(
        Fault.Mode.DECLINE,
        gettext_noop("Decline"),
        gettext_noop(
            "The provider declines: 402 payment-declined, stored and replayed for that key; "
            "nothing is charged, and paying again (a new key) works."
        ),
    ),
    FaultMode(
        Fault.Mode.ERROR_BEFORE_COMMIT,
        gettext_noop("Error before commit"),
        gettext_noop(
            "The provider fails with 500 and charges nothing: the shop answers 503 "
            "payment-outcome-unknown, and the same-key retry asks, finds nothing, and charges once."
        ),
    ),
    FaultMode(
        Fault.Mode.ERROR_AFTER_COMMIT,
        gettext_noop("Error after commit"),
        gettext_noop(
            "The provider charges, then fails with 500: 503 unknown, and the same-key retry finds "
            "the charge instead of making a second one."
        ),
    ),
    FaultMode(
        Fault.Mode.TIMEOUT_AFTER_COMMIT,
        gettext_noop("Timeout after commit"),
        gettext_noop(
            "The provider charges but answers after the shop stopped waiting: 503 unknown, then "
            "the same-key retry (or the reconciler) settles it as PAID, with one debit."
        ),
        takes_delay=True,
    ),
    FaultMode(
        Fault.Mode.CALLBACK_DUPLICATES,
        gettext_noop("Duplicate callbacks"),
        gettext_noop(
            "The provider sends its notification several times: the first is applied (or found "
            "already applied), every copy gets the same answer, nothing changes twice."
        ),
        takes_copies=True,
    ),
    FaultMode(
        Fault.Mode.CALLBACK_SHUFFLE,
        gettext_noop("Shuffled callbacks"),
        gettext_noop("Copies arrive late and out of order: states never move backwards."),
        takes_copies=True,
    ),
    FaultMode(
        Fault.Mode.CALLBACK_DROP,
        gettext_noop("Dropped callback"),
        gettext_noop(
            "No notification at all: the pay answer (or the reconciler) settles the payment alone."
        ),
    ),
    FaultMode(
        Fault.Mode.LATE_SUCCESS,
        gettext_noop("Late success"),
        gettext_noop(
            "The provider declines now and takes the money after the delay, as asynchronous "
            "methods do: the shop answers 402, then must account for that late capture (roll "
            "the order forward, or refund it) instead of keeping money it never sold anything for."
        ),
        takes_delay=True,
    ),
    FaultMode(
        Fault.Mode.REQUIRES_ACTION,
        gettext_noop("Customer must act"),
        gettext_noop(
            "The provider waits for the customer (3-D Secure): the shop answers 202 "
            "payment-action-required with what the client needs, stores nothing, and the same "
            "key answers 202 until the customer completes or abandons it at the provider; one "
            "nobody finishes is closed at the provider and failed after PAYMENT_ACTION_TIMEOUT_S."
        ),
    ),
    FaultMode(
        Fault.Mode.REFUND_REVERSAL,
        gettext_noop("Refund reversed"),
        gettext_noop(
            "A refund succeeds, then fails at the provider after the delay (a closed card): the "
            "shop books a reversing ledger entry, the order is PAID again, and a case asks a "
            "person to pay the customer back another way."
        ),
        takes_delay=True,
    ),
    FaultMode(
        Fault.Mode.DISPUTE_LOST,
        gettext_noop("Dispute lost"),
        gettext_noop(
            "After the delay the payer disputes the charge at their bank and wins: the shop "
            "books the dispute and the money withdrawn once, whatever order the notifications "
            "come in, the order can no longer be refunded, and a case asks a person to look."
        ),
        takes_delay=True,
    ),
)
FAULT_MODE_BY_NAME = {fault.mode: fault for fault in FAULT_MODES}

REPEAT_WHAT_SHOULD_HAPPEN = gettext_noop(
    "The same order request, same Idempotency-Key, sent 3 times: one 201 fresh, then the "
    "same 201 replayed twice. One order, one reservation of stock."
)
BURST_WHAT_SHOULD_HAPPEN = gettext_noop(
    "100 identical requests at once (20 at a time): exactly one runs; the others get its "
    "answer replayed, or 409 while it is still running. One order."
)
KILL_WHAT_SHOULD_HAPPEN = gettext_noop(
    "The worker is killed mid-task (SIGKILL: no clean shutdown). The demo's supervisor starts a "
    "new one. A task it was running was never acknowledged (acks_late), so the broker hands "
    "it out again (Redis does so only after its visibility timeout: the demo task above "
    "shows redelivery in seconds), and the task, safe to run twice, changes nothing the "
    "second time."
)

# Where the worker is not this server's neighbour (docker compose runs it in its own
# container, whose processes this one cannot see in /proc), the panel says so
# instead of offering buttons that could only fail.
KILL_NOT_FROM_HERE = gettext_noop(
    "The panel cannot kill the worker from here: it runs apart from this web server (under "
    "docker compose, in the worker container, whose processes this container cannot see). "
    "Kill it from the host with `docker compose kill worker`: its restart policy starts a "
    "new one, and a task it was running is handed out again. Under `make demo` the panel "
    "kills it itself."
)


# The faults are the sandbox's: a provider without them (the Stripe demo's emulator)
# gets this sentence in their place, and an arm or clear posted anyway does nothing.
NO_SCRIPTED_FAULTS = gettext_noop(
    "This demo's payment provider takes no scripted faults: they are the sandbox's "
    "(`make demo` runs it). What follows needs no provider faults and works here too."
)


def chaos_takes_faults() -> bool:
    """Whether the provider the shop pays through takes the panel's scripted faults."""
    return isinstance(get_provider(), TakesScriptedFaults)


def chaos_can_kill_here() -> bool:
    """Whether the worker runs beside this server, under the demo's supervisor."""
    return Path("/proc/self").exists() and demo.WORKER_PIDFILE.is_file()


# The panel's load test: identical requests, and how many are in flight at once. A
# small pool keeps the test far from PostgreSQL's 100 connections (the web server
# holds one per thread) while still racing on one key.
BURST_REQUESTS = 100
BURST_POOL = 20


def chaos_fault_arm(*, mode: str, count: int, delay_s: float, copies: int) -> None:
    """Arm a fault for the provider's next ``count`` new charges.

    Through the sandbox's own service rather than its HTTP faults API: that API is
    staff-only, and in demo mode the demo customers may script faults too.
    """
    fault_set(mode=mode, count=count, delay_s=delay_s, copies=copies)


def chaos_fault_clear() -> int:
    return fault_clear()


def _client_for(user_id: int) -> ShopClient:
    # The user's own API token: the panel's requests are that user's requests, scoped
    # to them like any client's (keys are per user).
    token, _ = Token.objects.get_or_create(user_id=user_id)
    return ShopClient(token=token.key)


def _order_body() -> dict[str, object]:
    product = product_cheapest_in_stock()
    if product is None:
        raise ChaosUnavailable(gettext("No product is in stock, so there is nothing to order."))
    return {"lines": [{"sku": product.sku, "quantity": 1}]}


@dataclass(frozen=True)
class RepeatResult:
    key: str
    answers: list[Answer]
    orders_made: int
    order_number: str | None


def chaos_repeat(*, user_id: int, times: int = 3) -> RepeatResult:
    """POST the same order request ``times`` times, one after the other, one key."""
    client, body, key = _client_for(user_id), _order_body(), str(uuid.uuid4())
    answers = [client.post(reverse("order-list"), key=key, json=body) for _ in range(times)]
    orders = Order.objects.filter(user_id=user_id, idempotency_key=key)
    first = orders.first()
    return RepeatResult(key, answers, orders.count(), first.number if first else None)


@dataclass(frozen=True)
class BurstResult:
    key: str
    requests: int
    pool: int
    tally: list[tuple[str, int]]  # (answer summary, how many), most frequent first
    orders_made: int
    order_number: str | None


def chaos_burst(
    *, user_id: int, requests: int | None = None, pool: int | None = None
) -> BurstResult:
    """Send ``requests`` identical order requests with one key, ``pool`` at a time."""
    requests, pool = requests or BURST_REQUESTS, pool or BURST_POOL
    client, body, key = _client_for(user_id), _order_body(), str(uuid.uuid4())
    path = reverse("order-list")
    # The threads only do HTTP; the server answers each with its own connection.
    with ThreadPoolExecutor(max_workers=pool) as executor:
        answers = list(
            executor.map(lambda _: client.post(path, key=key, json=body), range(requests))
        )
    tally = collections.Counter(answer.summary for answer in answers).most_common()
    orders = Order.objects.filter(user_id=user_id, idempotency_key=key)
    first = orders.first()
    return BurstResult(key, requests, pool, tally, orders.count(), first.number if first else None)


def _worker_pid(pidfile: Path) -> int:
    try:
        return int(pidfile.read_text().strip())
    except FileNotFoundError as error:
        raise ChaosUnavailable(
            gettext(
                "No supervised worker here (%(pidfile)s does not exist): only `make demo` "
                "runs the worker under its supervisor, which restarts it."
            )
            % {"pidfile": pidfile}
        ) from error
    except ValueError as error:
        raise ChaosUnavailable(
            gettext("The worker pid file %(pidfile)s is unreadable.") % {"pidfile": pidfile}
        ) from error


def chaos_kill_worker() -> int:
    """SIGKILL the demo's Celery worker (its whole process group); return its pid.

    Refuses unless the pid file names a live Celery worker that leads its own
    process group (as the demo supervisor starts it): a stale pid file must never
    make the panel kill an unrelated process that reused the number.
    """
    if not hasattr(os, "killpg") or not Path("/proc/self").exists():
        raise ChaosUnavailable(gettext("This platform cannot do this (it needs Linux's /proc)."))
    pid = _worker_pid(demo.WORKER_PIDFILE)
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError) as error:
        raise ChaosUnavailable(
            gettext(
                "The worker (pid %(pid)s) is not running right now; the supervisor is "
                "restarting it."
            )
            % {"pid": pid}
        ) from error
    if not (any(b"celery" in arg for arg in argv) and b"worker" in argv):
        raise ChaosUnavailable(
            gettext("pid %(pid)s is not a Celery worker (stale pid file): not killed.")
            % {"pid": pid}
        )
    if os.getpgid(pid) != pid:
        raise ChaosUnavailable(
            gettext("pid %(pid)s does not lead its own process group: not killed.") % {"pid": pid}
        )
    os.killpg(pid, signal.SIGKILL)
    return pid


def visibility_timeout_s() -> int | None:
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {}
    value = options.get("visibility_timeout")
    return int(value) if value is not None else None
