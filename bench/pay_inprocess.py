"""Paying an order inside the bench process: its SQL, and where its time goes.

Pays go through Django's test ``Client`` (the whole middleware, DRF and
idempotency stack on the bench database) one at a time, while the provider
stays where it is during the HTTP scenarios: the provider gunicorn, over
loopback HTTP. Its SQL thus runs there, and the statements counted here are
the shop's alone, as in ``tests/payments/test_query_budget.py``.

Also measured here: the sandbox's side of a charge (counted in-process) and
what a new connection per provider call costs.
"""

from __future__ import annotations

import ast
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from time import perf_counter
from typing import Any

from django.conf import settings
from django.test import Client, override_settings

from bench.context import Section
from bench.fixtures import PRICE, Payer, create_orders
from bench.inprocess import QueryCount, count_queries, ms_per_call
from bench.phases import Probe, Stopwatch, Timed, phase_rows, phase_section
from idempotency.models import IdempotencyKey, RecoveryPoint

ROOT = Path(__file__).resolve().parent.parent
QUERY_BUDGET_TEST = ROOT / "tests" / "payments" / "test_query_budget.py"
BODY = b"{}"  # the pay endpoint takes an empty JSON object
# Every payer's sandbox wallet starts this full (SANDBOX_WALLET_START), so no charge
# is ever declined for funds; far below BIGINT even after a run's debits.
WALLET_START = 10**15


def pay_path(number: str) -> str:
    return f"/api/v1/orders/{number}/pay/"


def pay_poster(*, provider_url: str, payer: Payer) -> Callable[[str, str], None]:
    """POST one pay in this process; anything but 200 is a broken set-up: raise.

    The provider is still the provider gunicorn, over loopback HTTP: its SQL runs
    there, so the count here is the shop's alone, as in the tests.
    """
    client = Client()

    def post(number: str, key: str) -> None:
        with override_settings(PROVIDER_BASE_URL=f"{provider_url}/sandbox"):
            response = client.post(
                pay_path(number),
                BODY,
                content_type="application/json",
                headers={"Authorization": f"Token {payer.token}", "Idempotency-Key": key},
            )
        if response.status_code != 200:
            raise RuntimeError(f"in-process pay: {response.status_code} {response.content!r}")

    return post


def pay_query_counts(
    post: Callable[[str, str], None], numbers: Iterator[str]
) -> tuple[QueryCount, QueryCount]:
    """The SQL of one pay and of its replay (after one warm-up pay)."""
    post(next(numbers), str(uuid.uuid4()))  # connection open, caches filled
    number, key = next(numbers), str(uuid.uuid4())
    return count_queries(lambda: post(number, key)), count_queries(lambda: post(number, key))


PHASE_1 = "phase 1: attempt committed (key insert, order lock, payment insert, COMMIT)"
ATTEMPT_READ = "attempt read before the call (outside any transaction)"
PROVIDER_CALL = "provider charge over loopback HTTP (the sandbox's own work included)"
PHASE_2 = "phase 2: settled (payment, ledger, order PAID, answer, key, COMMIT)"
ENQUEUE = "fulfilment task enqueued on commit (Celery LPUSH to Redis), in phase 2"
_ASK = "_ask_provider"  # the attempt read and the provider charge together


def _pay_phase(record: IdempotencyKey, *_args: Any, **_kwargs: Any) -> str:
    """Which phase an ``atomic_phase`` call is: the record's recovery point at entry."""
    return PHASE_1 if record.recovery_point == RecoveryPoint.STARTED else PHASE_2


def pay_probes() -> list[Probe]:
    from celery.app.task import Task

    from payments import flows
    from payments.providers.sandbox import SandboxProvider

    return [
        Probe(flows, "atomic_phase", _pay_phase),
        Probe(flows, "_ask_provider", _ASK),
        Probe(SandboxProvider, "charge", PROVIDER_CALL),
        # Every task's apply_async; in this process only fulfil_order is sent (the
        # sandbox's notification tasks are sent by the gunicorn that serves it).
        Probe(Task, "apply_async", ENQUEUE),
    ]


def time_pays(post: Callable[[str, str], None], numbers: Iterator[str], iterations: int) -> Timed:
    """``iterations`` pays, each with its own order and key, their phases timed."""
    stopwatch = Stopwatch()
    with stopwatch.probing(pay_probes()):
        started = perf_counter()
        for _ in range(iterations):
            post(next(numbers), str(uuid.uuid4()))
        total = perf_counter() - started
    seconds = dict(stopwatch.seconds)
    seconds[ATTEMPT_READ] = seconds.pop(_ASK, 0.0) - seconds.get(PROVIDER_CALL, 0.0)
    return Timed(iterations=iterations, total_s=total, seconds=seconds)


def sandbox_charge_cost(*, iterations: int) -> tuple[QueryCount, float]:
    """The SQL and mean ms of one new charge at the sandbox, called in this process.

    What the provider round trip of a pay contains besides HTTP: run here, without
    the socket, the sandbox's own statements can be counted.
    """
    client = Client()
    headers = {"Authorization": f"Bearer {settings.PROVIDER_API_KEY}"}

    def charge() -> None:
        out_trade_no = f"PBENCH{uuid.uuid4().hex[:16].upper()}"
        body = {
            "out_trade_no": out_trade_no,
            "amount": PRICE,
            "currency": "CNY",
            "payer": "bench-sandbox-direct",
            "notify_url": "http://127.0.0.1:9/api/v1/callbacks/sandbox/",  # never delivered
        }
        response = client.post(
            "/sandbox/v1/charges",
            body,
            content_type="application/json",
            headers={**headers, "Idempotency-Key": f"onceshop-{out_trade_no}"},
        )
        if response.status_code != 200:
            raise RuntimeError(f"in-process charge: {response.status_code} {response.content!r}")

    never = "http://127.0.0.1:9"  # allowed for this measurement only: nothing listens
    with override_settings(SANDBOX_WALLET_START=WALLET_START, SANDBOX_NOTIFY_URLS=[never]):
        charge()  # the wallet is created on first use: not what a charge usually costs
        count = count_queries(charge)
        started = perf_counter()
        for _ in range(iterations):
            charge()
        ms = (perf_counter() - started) * 1000 / iterations
    return count, ms


def provider_connection_cost(provider_url: str, *, iterations: int) -> tuple[float, float]:
    """Mean ms of one provider call with a new client each time, and with one kept.

    The pay view builds its provider client (a ``requests.Session``) per request,
    so every pay opens a new connection to the provider; this puts a figure on
    that. The call is the cheapest there is: a query for an unknown attempt (404,
    one indexed lookup at the sandbox). Alternating rounds: drift hits both alike.
    """
    from payments.providers.sandbox import SandboxProvider

    def client() -> SandboxProvider:
        return SandboxProvider(
            base_url=f"{provider_url}/sandbox",
            api_key=settings.PROVIDER_API_KEY,
            timeout_s=settings.PROVIDER_TIMEOUT_S,
            webhook_secrets=[],
        )

    kept, missing = client(), "PBENCH-NO-SUCH-ATTEMPT"
    kept.query(out_trade_no=missing)  # its connection is open from here on
    per_round = max(1, iterations // 2)
    fresh_ms, kept_ms = [], []
    for _ in range(2):
        fresh_ms.append(ms_per_call(lambda: client().query(out_trade_no=missing), per_round))
        kept_ms.append(ms_per_call(lambda: kept.query(out_trade_no=missing), per_round))
    kept.session.close()
    return fmean(fresh_ms), fmean(kept_ms)


@dataclass(frozen=True)
class InProcess:
    pay_sql: QueryCount
    replay_sql: QueryCount
    timed: Timed
    replay_ms: float
    sandbox_sql: QueryCount
    sandbox_ms: float
    new_connection_ms: float  # one provider call with a new client, as the pay view does
    kept_connection_ms: float  # the same call on a kept-alive connection


def in_process(provider_url: str, payer: Payer, *, sku: str, iterations: int) -> InProcess:
    """The SQL and the phases of one pay, the cost of a replay and of the sandbox's charge."""
    # A warm-up pay, the counted pay, the timed pays and the pay whose replay is timed.
    numbers = iter(create_orders(user_id=payer.user_id, sku=sku, count=iterations + 3))
    post = pay_poster(provider_url=provider_url, payer=payer)
    pay_sql, replay_sql = pay_query_counts(post, numbers)
    timed = time_pays(post, numbers, iterations)
    number, key = next(numbers), str(uuid.uuid4())
    post(number, key)
    replay_ms = ms_per_call(lambda: post(number, key), iterations)
    sandbox_sql, sandbox_ms = sandbox_charge_cost(iterations=iterations)
    new_ms, kept_ms = provider_connection_cost(provider_url, iterations=iterations)
    return InProcess(
        pay_sql, replay_sql, timed, replay_ms, sandbox_sql, sandbox_ms, new_ms, kept_ms
    )


def pinned_constant(source: str, name: str) -> int | None:
    """The integer a module assigns to ``name`` at top level (e.g. a test's pinned count)."""
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, int)
        ):
            return node.value.value
    return None


def phases_section(timed: Timed) -> Section:
    rows = phase_rows(
        timed.seconds,
        phases=[PHASE_1, ATTEMPT_READ, PROVIDER_CALL, PHASE_2],
        nested=[ENQUEUE],
        remainder="rest (auth, throttle, key lookup, DRF, rendering)",
        total_s=timed.total_s,
        iterations=timed.iterations,
    )
    return phase_section(
        f"Where one pay spends its time ({timed.iterations} pays, in-process)",
        "One pay at a time through Django's test client in the bench process; the provider "
        "is the provider gunicorn over loopback HTTP (idle meanwhile). Wall time inside the "
        "flow's functions, wrapped in the bench process (the app is unchanged); rows marked "
        "`-` lie inside a phase above them.",
        rows,
        timed.ms_per_request,
    )
