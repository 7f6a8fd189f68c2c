"""Paying and refunding an order, with the provider round trip, and their replays.

16 clients, each its own payer on its own pre-created orders, against the
shop's gunicorn, whose provider is the sandbox on a second gunicorn (see
``shop_and_provider``). Then in-process: the SQL of one pay and of its replay
against the count the tests pin (``PAY_QUERIES``), one pay's phases, the
sandbox's side of a charge, and a new provider connection per call against a
kept one. docs/benchmarks.md describes each scenario.
"""

from __future__ import annotations

import ast
import math
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from statistics import fmean
from time import monotonic
from typing import Any

from celery.app.task import Task
from django.conf import settings
from django.test import Client, override_settings

from idempotency.models import IdempotencyKey, RecoveryPoint
from payments import flows
from payments.models import Payment, PaymentStatus
from payments.providers.sandbox import SandboxProvider
from tools.bench import ROOT, fixtures, inprocess
from tools.bench.appserver import HOST, Server, tree_cpu_seconds
from tools.bench.context import BenchContext, Section, Suite, SuiteResult
from tools.bench.harness import HttpRequest, RequestFactory, keyed_post
from tools.bench.markdown import fmt
from tools.bench.reconcile_pass import sandbox_provider
from tools.bench.stats import Figure, Target, Throughput, figures, ratio

SKU = "PAY-1"
# Orders pre-created per client must outlast warm-up + measurement. Sized for this
# rate (pays/s over all clients), about 3x what a busy 2-core machine reached; a
# client that runs out anyway is reported (`clients that ran out`), never averaged in.
PAY_RATE_BOUND_PER_S = 100.0
# In-process pays timed phase by phase (each pay is a full provider round trip).
PHASE_ITERATIONS, QUICK_PHASE_ITERATIONS = 100, 10
# The Celery queue the bench's tasks go to (sandbox notifications, fulfilment):
# no worker consumes it, and it is deleted after the suite.
PAY_QUEUE = "onceshop-bench-pay"
# Every payer's sandbox wallet starts this full (SANDBOX_WALLET_START), so no charge
# is ever declined for funds; far below BIGINT even after a run's debits.
WALLET_START = 10**15
BODIES = {"pay": b"{}", "refunds": b'{"reason": "bench"}'}  # a refund of the whole amount
QUERY_BUDGET_TEST = ROOT / "tests" / "payments" / "test_query_budget.py"

PHASE_1 = "phase 1: attempt committed (key insert, order lock, payment insert, COMMIT)"
ATTEMPT_READ = "attempt read before the call (outside any transaction)"
PROVIDER_CALL = "provider charge over loopback HTTP (the sandbox's own work included)"
PHASE_2 = "phase 2: settled (payment, ledger, order PAID, answer, key, COMMIT)"
ENQUEUE = "fulfilment task enqueued on commit (Celery LPUSH to Redis), in phase 2"
_ASK = "_ask_provider"  # the attempt read and the provider charge together
NONE = Target("<=", 0)
FIGURES: tuple[Figure, ...] = (
    ("pay_replay_vs_first", "pay replay / first-time req/s", "x", None),
    ("pay_provider_cpu_ms", "provider gunicorn CPU ms per pay", "ms", None),
    ("refund_replay_vs_first", "refund replay / first-time req/s", "x", None),
    ("refund_out_of_orders", "clients that ran out of paid orders to refund", "", None),
    ("queries_pay", "SQL statements, one pay (shop side)", "", None),
    ("queries_pay_pinned", "PAY_QUERIES in tests/payments/test_query_budget.py", "", None),
    ("queries_pay_replay", "SQL statements, pay replay", "", Target("<=", 2)),
    ("queries_sandbox_charge", "SQL statements, one sandbox charge (provider side)", "", None),
    ("ms_pay", "ms per pay (1 thread, in-process)", "ms", None),
    ("ms_pay_replay", "ms per pay replay (1 thread)", "ms", None),
    ("ms_sandbox_charge", "ms per sandbox charge (1 thread, in-process)", "ms", None),
    (
        "ms_provider_call_new_connection",
        "ms per provider call, new connection (as the shop)",
        "ms",
        None,
    ),
    ("ms_provider_call_kept_connection", "ms per provider call, connection kept alive", "ms", None),
    # What makes the figures trustworthy: nobody starved, nothing left unresolved.
    ("pay_out_of_orders", "clients that ran out of orders", "", NONE),
    ("pay_unsettled", "attempts left PENDING or UNKNOWN", "", NONE),
)
NOTES = {
    "refund_out_of_orders": "the refund scenario refunds what the pay scenario paid; "
    "a client out of them stops early and its rate is low",
    "queries_pay_replay": "authentication + the key lookup",
    "ms_sandbox_charge": "the provider's work inside a pay, without HTTP",
    "ms_provider_call_new_connection": "a 404 query: one indexed lookup at the sandbox",
    "pay_unsettled": "non-zero: a provider call failed or timed out",
}


@contextmanager
def shop_and_provider(ctx: BenchContext, *, queue: str) -> Iterator[tuple[Server, Server]]:
    """Two gunicorns on the bench database: the provider's, then the shop's, which calls it.

    Not the demo's single server: a pay holds a gunicorn thread while it waits on
    the provider, and with 16 clients on 2 workers x 8 threads every thread ends up
    holding a pay whose provider call waits for a free thread of the same server,
    until PROVIDER_TIMEOUT_S: 503s and UNKNOWN attempts, not throughput (measured:
    5.7 pays/s, p95 4.9 s). A real provider has its own capacity.
    """
    wallet = str(WALLET_START)
    with ctx.server("pay-provider", SANDBOX_WALLET_START=wallet, CELERY_QUEUE=queue) as provider:
        # SHOP_BASE_URL stays the default on both servers: the notify_url the shop
        # sends is then on the provider's allow-list (SANDBOX_NOTIFY_URLS, empty:
        # SHOP_BASE_URL). No notification is delivered in the bench anyway.
        base = f"http://{HOST}:{provider.port}/sandbox"
        with ctx.server(
            "pay-shop", PROVIDER_BASE_URL=base, SANDBOX_WALLET_START=wallet, CELERY_QUEUE=queue
        ) as shop:
            yield shop, provider


@dataclass
class Plan:
    """Client i pays (``action="pay"``) or refunds (``"refunds"``) as ``payers[i]``,
    its ``orders[i]`` in turn; ``sent[i]`` is the (order number, key) of every
    request it sent, for the replays."""

    action: str
    payers: list[fixtures.Payer]
    orders: list[list[str]]
    sent: list[list[tuple[str, str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sent = [[] for _ in self.payers]

    def request(self, client: int, number: str, key: str, *, replayed: bool) -> HttpRequest:
        path, token = f"/api/v1/orders/{number}/{self.action}/", self.payers[client].token
        return keyed_post(path, BODIES[self.action], token=token, key=key, replayed=replayed)

    def fresh(self) -> RequestFactory:
        """Each client its next order with a new key; None when it has none left."""

        def factory(client: int, n: int) -> HttpRequest | None:
            if n >= len(self.orders[client]):
                return None
            number, key = self.orders[client][n], str(uuid.uuid4())
            self.sent[client].append((number, key))
            return self.request(client, number, key, replayed=False)

        return factory

    def out_of_orders(self) -> int:
        """Clients that used up their orders (and stopped before the window ended)."""
        return sum(len(s) >= len(o) for s, o in zip(self.sent, self.orders, strict=True))

    def finished(self) -> list[list[tuple[str, str]]]:
        """Per client, the requests that finished with 200 (what a replay gets)."""
        keys = [key for sent in self.sent for _, key in sent]
        done = set(
            IdempotencyKey.objects.filter(
                key__in=keys, recovery_point=RecoveryPoint.FINISHED, response_status=200
            ).values_list("user_id", "key")
        )
        return [
            [(number, key) for number, key in sent if (payer.user_id, key) in done]
            for payer, sent in zip(self.payers, self.sent, strict=True)
        ]

    def replays(self) -> RequestFactory:
        """Client i re-sends its own finished requests, round and round."""
        finished = self.finished()
        if not all(finished):
            raise RuntimeError(f"a client has no finished {self.action} to replay: see its errors")
        return lambda client, n: self.request(
            client, *finished[client][n % len(finished[client])], replayed=True
        )


def _pay_phase(record: IdempotencyKey, *_args: Any, **_kwargs: Any) -> str:
    """Which phase an ``atomic_phase`` call is: the record's recovery point at entry."""
    return PHASE_1 if record.recovery_point == RecoveryPoint.STARTED else PHASE_2


def in_process(
    provider: Server, payer: fixtures.Payer, *, iterations: int
) -> tuple[dict[str, float], str, list[Section]]:
    """One pay at a time through Django's test client, the provider still the provider
    gunicorn over loopback HTTP: its SQL runs there, so the statements counted here
    are the shop's alone, as in test_query_budget.py. Then the sandbox's side of a
    charge, and a provider call on a new connection against one kept alive."""
    # A warm-up pay, the counted pay, the timed pays and the pay whose replay is timed.
    numbers = iter(fixtures.create_orders(user_id=payer.user_id, sku=SKU, count=iterations + 3))
    client, headers = Client(), {"Authorization": f"Token {payer.token}"}

    def pay(number: str, key: str) -> None:
        with override_settings(PROVIDER_BASE_URL=f"http://{HOST}:{provider.port}/sandbox"):
            path = f"/api/v1/orders/{number}/pay/"
            inprocess.post(client, path, BODIES["pay"], {**headers, "Idempotency-Key": key}, 200)

    pay(next(numbers), str(uuid.uuid4()))  # connection open, caches filled
    number, key = next(numbers), str(uuid.uuid4())
    pay_sql = inprocess.count_queries(lambda: pay(number, key))
    replay_sql = inprocess.count_queries(lambda: pay(number, key))
    probes = [
        inprocess.Probe(flows, "atomic_phase", _pay_phase),
        inprocess.Probe(flows, "_ask_provider", _ASK),
        inprocess.Probe(SandboxProvider, "charge", PROVIDER_CALL),
        # Every task's apply_async; in this process only fulfil_order is sent (the
        # sandbox's notification tasks are sent by the gunicorn that serves it).
        inprocess.Probe(Task, "apply_async", ENQUEUE),
    ]
    timed = inprocess.time_phases(lambda: pay(next(numbers), str(uuid.uuid4())), iterations, probes)
    asked = timed.seconds.pop(_ASK, 0.0)
    timed.seconds[ATTEMPT_READ] = asked - timed.seconds.get(PROVIDER_CALL, 0.0)
    number, key = next(numbers), str(uuid.uuid4())
    pay(number, key)
    replay_ms = inprocess.ms_per_call(lambda: pay(number, key), iterations)

    # The sandbox's side of a charge, called in this process so its statements can
    # be counted: what the provider round trip of a pay contains besides HTTP.
    never = "http://127.0.0.1:9"  # allowed for this measurement only: nothing listens
    sandbox, bearer = Client(), {"Authorization": f"Bearer {settings.PROVIDER_API_KEY}"}

    def charge() -> None:
        out_trade_no = f"PBENCH{uuid.uuid4().hex[:16].upper()}"
        body = {
            "out_trade_no": out_trade_no,
            "amount": fixtures.PRICE,
            "currency": "CNY",
            "payer": "bench-sandbox-direct",
            "notify_url": f"{never}/api/v1/callbacks/sandbox/",  # never delivered
        }
        idempotency = {**bearer, "Idempotency-Key": f"onceshop-{out_trade_no}"}
        inprocess.post(sandbox, "/sandbox/v1/charges", body, idempotency, 200)

    with override_settings(SANDBOX_WALLET_START=WALLET_START, SANDBOX_NOTIFY_URLS=[never]):
        charge()  # the wallet is created on first use: not what a charge usually costs
        sandbox_sql = inprocess.count_queries(charge)
        sandbox_ms = inprocess.ms_per_call(charge, iterations)

    # The cheapest provider call there is: a query for an unknown attempt (404, one
    # indexed lookup at the sandbox), with a new client each time and with one kept,
    # in alternating rounds so that drift hits both alike.
    kept, missing = sandbox_provider(provider.port), "PBENCH-NO-SUCH-ATTEMPT"
    assert isinstance(kept, SandboxProvider)  # its session, closed below
    kept.query(out_trade_no=missing)  # its connection is open from here on
    per_round, new_ms, kept_ms = max(1, iterations // 2), [], []

    def on_a_new_connection() -> object:
        return sandbox_provider(provider.port).query(out_trade_no=missing)

    for _ in range(2):
        new_ms.append(inprocess.ms_per_call(on_a_new_connection, per_round))
        kept_ms.append(inprocess.ms_per_call(lambda: kept.query(out_trade_no=missing), per_round))
    kept.session.close()

    pinned = pinned_constant(QUERY_BUDGET_TEST.read_text(), "PAY_QUERIES")
    match = "n/a" if pinned is None else ("matches" if pinned == pay_sql.total else "DIFFERS")
    intro = (
        "One pay at a time through Django's test client in the bench process; the provider "
        "is the provider gunicorn over loopback HTTP (idle meanwhile). Wall time inside the "
        "flow's functions, wrapped in the bench process (the app is unchanged); rows marked "
        "`-` lie inside a phase above them."
    )
    values = {
        "queries_pay": pay_sql.total,
        "queries_pay_pinned": math.nan if pinned is None else pinned,
        "queries_pay_replay": replay_sql.total,
        "queries_sandbox_charge": sandbox_sql.total,
        "ms_pay": timed.ms_per_request,
        "ms_pay_replay": replay_ms,
        "ms_sandbox_charge": sandbox_ms,
        "ms_provider_call_new_connection": fmean(new_ms),
        "ms_provider_call_kept_connection": fmean(kept_ms),
    }
    sections = [
        inprocess.phase_section(
            f"Where one pay spends its time ({iterations} pays, in-process)",
            intro,
            timed,
            phases=[PHASE_1, ATTEMPT_READ, PROVIDER_CALL, PHASE_2],
            nested=[ENQUEUE],
            rest="rest (auth, throttle, key lookup, DRF, rendering)",
        ),
        inprocess.sql_section("SQL of one pay (shop side)", pay_sql),
        inprocess.sql_section("SQL of one sandbox charge (provider side)", sandbox_sql),
    ]
    return values, f"{match} PAY_QUERIES", sections


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


def run(ctx: BenchContext) -> SuiteResult:
    fixtures.seed_product(SKU)
    # One payer per client, as many customers paying at once: with a single payer
    # every charge would queue on that payer's sandbox wallet row (its debit). The
    # last payer pays in this process.
    payers = fixtures.create_payers(prefix="bench-pay", count=ctx.options.clients + 1)
    seconds = ctx.options.warmup_s + ctx.options.measure_s
    each = fixtures.rows_needed(
        rate_bound=PAY_RATE_BOUND_PER_S, seconds=seconds, clients=len(payers) - 1
    )
    orders = [fixtures.create_orders(user_id=p.user_id, sku=SKU, count=each) for p in payers[:-1]]
    pays = Plan("pay", payers[:-1], orders)
    with (
        fixtures.bench_queue(name=PAY_QUEUE, redis_url=ctx.redis_url) as queue,
        shop_and_provider(ctx, queue=queue) as (shop, provider),
    ):

        def scenario(name: str, label: str, factory: RequestFactory) -> tuple[Throughput, float]:
            """``measure`` against the shop, and the provider gunicorn's CPU (cores) meanwhile."""
            cpu, started = tree_cpu_seconds(provider.pid), monotonic()
            throughput = ctx.measure(shop, name, label, factory)
            return throughput, (tree_cpu_seconds(provider.pid) - cpu) / (monotonic() - started)

        pay, provider_cpu = scenario(
            "pay_first", "pay: first-time (provider round trip)", pays.fresh()
        )
        replay, _ = scenario("pay_replay", "pay: replay (same key again)", pays.replays())
        # Refund what the pay scenario paid, then replay those refunds.
        refunds = Plan("refunds", pays.payers, [[n for n, _ in done] for done in pays.finished()])
        refund, _ = scenario(
            "refund_first", "refund: first-time (provider round trip)", refunds.fresh()
        )
        refund_replay, _ = scenario(
            "refund_replay", "refund: replay (same key again)", refunds.replays()
        )
        iterations = QUICK_PHASE_ITERATIONS if ctx.options.quick else PHASE_ITERATIONS
        local, pinned_note, sections = in_process(provider, payers[-1], iterations=iterations)
    unsettled = Payment.objects.filter(status__in=[PaymentStatus.PENDING, PaymentStatus.UNKNOWN])
    values = {
        "pay_replay_vs_first": ratio(replay.per_second, pay.per_second),
        "pay_provider_cpu_ms": ratio(provider_cpu * 1000, pay.per_second),
        "refund_replay_vs_first": ratio(refund_replay.per_second, refund.per_second),
        "refund_out_of_orders": refunds.out_of_orders(),
        **local,
        "pay_out_of_orders": pays.out_of_orders(),
        "pay_unsettled": unsettled.count(),
    }
    notes = {
        **NOTES,
        "pay_provider_cpu_ms": f"{fmt(provider_cpu, 2)} cores; the shop's own is in the table "
        "above",
        "queries_pay": pinned_note,
        "pay_out_of_orders": f"{each} pre-created each",
    }
    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        throughputs=[pay, replay, refund, refund_replay],
        metrics=figures(FIGURES, values, notes),
        sections=sections,
    )


SUITE = Suite(name="pay", title="Paying an order (POST /api/v1/orders/{number}/pay/)", run=run)
