"""Paying an order: the pay flow with its provider round trip, and what a replay saves.

Scenarios, each with 16 keep-alive clients against the shop's gunicorn, whose
provider is the sandbox served by a second gunicorn (see ``shop_and_provider``):

* **pay**: ``POST /api/v1/orders/{number}/pay/`` with a fresh key, each client on
  its own UNPAID orders (pre-created in-process) and as its own payer: phase 1
  commits the attempt, the provider is called over loopback HTTP outside any
  transaction, phase 2 settles it;
* **pay replay**: the same requests re-sent with their keys: answered from the
  stored record, the provider is never called.

Then, in-process (``bench/pay_inprocess.py``): the SQL of one pay and of its
replay, set against the count the tests pin (``PAY_QUERIES``), where one pay
spends its time phase by phase, the sandbox's side of a charge, and what a new
provider connection per pay costs.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import monotonic

from bench import appserver
from bench.context import BenchContext, Suite, SuiteResult
from bench.fixtures import (
    Payer,
    bench_queue,
    create_orders,
    create_payers,
    rows_needed,
    seed_product,
)
from bench.harness import HttpRequest, RequestFactory, measure
from bench.markdown import fmt
from bench.orders_inprocess import sql_section
from bench.pay_inprocess import (
    BODY,
    QUERY_BUDGET_TEST,
    WALLET_START,
    InProcess,
    in_process,
    pay_path,
    phases_section,
    pinned_constant,
)
from bench.stats import Metric, Target, Throughput, ratio
from idempotency.models import IdempotencyKey, RecoveryPoint
from payments.models import Payment, PaymentStatus

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


# --- The servers: the shop, and the sandbox provider on a gunicorn of its own ------


@dataclass(frozen=True)
class Servers:
    shop: appserver.Server  # what the clients call
    provider: appserver.Server  # what the shop calls (its /sandbox/ mount)

    @property
    def provider_url(self) -> str:
        return f"http://{appserver.HOST}:{self.provider.port}"


@contextmanager
def shop_and_provider(ctx: BenchContext, *, queue: str) -> Iterator[Servers]:
    """Two gunicorns on the bench database: the provider's, then the shop's, which calls it.

    Not the demo's single server: a pay holds a gunicorn thread while it waits on
    the provider, and with 16 clients on 2 workers x 8 threads every thread ends up
    holding a pay whose provider call waits for a free thread of the same server,
    until PROVIDER_TIMEOUT_S: 503s and UNKNOWN attempts, not throughput (measured:
    5.7 pays/s, p95 4.9 s). A real provider has its own capacity, so it gets its own
    gunicorn, started the same way (same app, with the sandbox's routes).
    """
    with ctx.server(
        "pay-provider", SANDBOX_WALLET_START=str(WALLET_START), CELERY_QUEUE=queue
    ) as provider:
        base = f"http://{appserver.HOST}:{provider.port}"
        with ctx.server(
            "pay-shop",
            PROVIDER_BASE_URL=f"{base}/sandbox",
            # SHOP_BASE_URL stays the default on both servers: the notify_url the shop
            # sends is then on the provider's allow-list (SANDBOX_NOTIFY_URLS, empty:
            # SHOP_BASE_URL). No notification is delivered in the bench anyway.
            SANDBOX_WALLET_START=str(WALLET_START),
            CELERY_QUEUE=queue,
        ) as shop:
            yield Servers(shop=shop, provider=provider)


# --- Requests -----------------------------------------------------------------------


def money_request(*, path: str, body: bytes, token: str, key: str, replayed: bool) -> HttpRequest:
    """A pay or refund request: a POST with a key, as the user whose token it is."""
    return HttpRequest(
        method="POST",
        path=path,
        body=body,
        headers={
            "Authorization": f"Token {token}",
            "Content-Type": "application/json",
            "Idempotency-Key": key,
        },
        expect_headers={"Idempotent-Replayed": "true" if replayed else "false"},
    )


def pay_request(*, token: str, number: str, key: str, replayed: bool) -> HttpRequest:
    return money_request(path=pay_path(number), body=BODY, token=token, key=key, replayed=replayed)


@dataclass
class PayPlan:
    """Client i pays as ``payers[i]``, its ``orders[i]`` in turn; ``sent[i]`` records
    the (order number, key) of every pay it sent, for the replay scenario."""

    payers: list[Payer]
    orders: list[list[str]]
    sent: list[list[tuple[str, str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sent = [[] for _ in self.payers]

    def out_of_orders(self) -> int:
        """Clients that used up their orders (and stopped before the window ended)."""
        return sum(
            1
            for sent, orders in zip(self.sent, self.orders, strict=True)
            if len(sent) >= len(orders)
        )


def fresh_pays(plan: PayPlan) -> RequestFactory:
    """Each client pays its next UNPAID order with a new key; None when it has none left."""

    def factory(client: int, n: int) -> HttpRequest | None:
        if n >= len(plan.orders[client]):
            return None
        number, key = plan.orders[client][n], str(uuid.uuid4())
        plan.sent[client].append((number, key))
        return pay_request(token=plan.payers[client].token, number=number, key=key, replayed=False)

    return factory


def finished_pays(plan: PayPlan) -> list[list[tuple[str, str]]]:
    """Per client, the pays that finished with 200 (their answer is what a replay gets)."""
    keys = [key for sent in plan.sent for _, key in sent]
    done = set(
        IdempotencyKey.objects.filter(
            key__in=keys, recovery_point=RecoveryPoint.FINISHED, response_status=200
        ).values_list("user_id", "key")
    )
    return [
        [(number, key) for number, key in sent if (payer.user_id, key) in done]
        for payer, sent in zip(plan.payers, plan.sent, strict=True)
    ]


def replayed_pays(plan: PayPlan, finished: list[list[tuple[str, str]]]) -> RequestFactory:
    """Client i re-sends its own finished pays, round and round."""
    if not all(finished):
        raise RuntimeError("a client has no finished pay to replay: see the pay scenario's errors")

    def factory(client: int, n: int) -> HttpRequest | None:
        number, key = finished[client][n % len(finished[client])]
        return pay_request(token=plan.payers[client].token, number=number, key=key, replayed=True)

    return factory


# --- The suite ----------------------------------------------------------------------


@dataclass(frozen=True)
class Loaded:
    """A scenario's figures, and the provider gunicorn's CPU over the same run (cores)."""

    throughput: Throughput
    provider_cpu: float


def measure_with_provider(
    ctx: BenchContext, servers: Servers, *, name: str, label: str, factory: RequestFactory
) -> Loaded:
    """``measure`` against the shop; the provider's CPU is read around it, as the shop's is."""
    cpu_before, started = appserver.tree_cpu_seconds(servers.provider.pid), monotonic()
    throughput = measure(
        name=name,
        label=label,
        server=servers.shop,
        factory=factory,
        plan=ctx.drive,
        database_url=ctx.database_url,
    )
    cpu = appserver.tree_cpu_seconds(servers.provider.pid) - cpu_before
    return Loaded(throughput=throughput, provider_cpu=cpu / (monotonic() - started))


REFUND_BODY = b'{"reason": "bench"}'  # the whole amount: the order becomes REFUNDED


def refund_request(*, token: str, number: str, key: str, replayed: bool) -> HttpRequest:
    path = f"/api/v1/orders/{number}/refunds/"
    return money_request(path=path, body=REFUND_BODY, token=token, key=key, replayed=replayed)


@dataclass
class RefundPlan:
    """Client i refunds its own paid orders in turn (``sent`` as in ``PayPlan``)."""

    payers: list[Payer]
    paid: list[list[str]]
    sent: list[list[tuple[str, str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sent = [[] for _ in self.payers]

    def out_of_orders(self) -> int:
        return sum(
            1 for sent, paid in zip(self.sent, self.paid, strict=True) if len(sent) >= len(paid)
        )


def fresh_refunds(plan: RefundPlan) -> RequestFactory:
    """Each client refunds its next PAID order in full with a new key."""

    def factory(client: int, n: int) -> HttpRequest | None:
        if n >= len(plan.paid[client]):
            return None
        number, key = plan.paid[client][n], str(uuid.uuid4())
        plan.sent[client].append((number, key))
        token = plan.payers[client].token
        return refund_request(token=token, number=number, key=key, replayed=False)

    return factory


def replayed_refunds(plan: RefundPlan) -> RequestFactory:
    """Client i re-sends its own finished refunds, round and round."""
    keys = [key for sent in plan.sent for _, key in sent]
    done = set(
        IdempotencyKey.objects.filter(
            key__in=keys, recovery_point=RecoveryPoint.FINISHED, response_status=200
        ).values_list("key", flat=True)
    )
    finished = [[(n, k) for n, k in sent if k in done] for sent in plan.sent]
    if not all(finished):
        raise RuntimeError("a client has no finished refund to replay: see the refund errors")

    def factory(client: int, n: int) -> HttpRequest | None:
        number, key = finished[client][n % len(finished[client])]
        token = plan.payers[client].token
        return refund_request(token=token, number=number, key=key, replayed=True)

    return factory


def refund_scenarios(
    ctx: BenchContext, servers: Servers, plan: PayPlan
) -> tuple[Loaded, Loaded, RefundPlan]:
    """Refund the orders the pay scenario paid, then replay those refunds."""
    paid = [[number for number, _ in done] for done in finished_pays(plan)]
    refunds = RefundPlan(payers=plan.payers, paid=paid)
    first = measure_with_provider(
        ctx,
        servers,
        name="refund_first",
        label="refund: first-time (provider round trip)",
        factory=fresh_refunds(refunds),
    )
    replay = measure_with_provider(
        ctx,
        servers,
        name="refund_replay",
        label="refund: replay (same key again)",
        factory=replayed_refunds(refunds),
    )
    return first, replay, refunds


def http_scenarios(ctx: BenchContext, servers: Servers, plan: PayPlan) -> tuple[Loaded, Loaded]:
    """Pay with fresh keys, then replay the pays that finished."""
    pay = measure_with_provider(
        ctx,
        servers,
        name="pay_first",
        label="pay: first-time (provider round trip)",
        factory=fresh_pays(plan),
    )
    replay = measure_with_provider(
        ctx,
        servers,
        name="pay_replay",
        label="pay: replay (same key again)",
        factory=replayed_pays(plan, finished_pays(plan)),
    )
    return pay, replay


def unsettled_payments() -> int:
    """Attempts a run left PENDING or UNKNOWN: 0 unless a provider call failed."""
    return Payment.objects.filter(status__in=[PaymentStatus.PENDING, PaymentStatus.UNKNOWN]).count()


def plan_pays(ctx: BenchContext, payers: list[Payer]) -> PayPlan:
    per_client = rows_needed(
        rate_bound=PAY_RATE_BOUND_PER_S,
        seconds=ctx.options.warmup_s + ctx.options.measure_s,
        clients=len(payers),
    )
    orders = [create_orders(user_id=p.user_id, sku=SKU, count=per_client) for p in payers]
    return PayPlan(payers=payers, orders=orders)


def run(ctx: BenchContext) -> SuiteResult:
    seed_product(SKU)
    # One payer per client, as many customers paying at once: with a single payer
    # every charge would queue on that payer's sandbox wallet row (its debit). The
    # last payer pays in this process.
    payers = create_payers(prefix="bench-pay", count=ctx.options.clients + 1)
    plan = plan_pays(ctx, payers[:-1])
    with (
        bench_queue(name=PAY_QUEUE, redis_url=ctx.redis_url) as queue,
        shop_and_provider(ctx, queue=queue) as servers,
    ):
        pay, replay = http_scenarios(ctx, servers, plan)
        refund, refund_replay, refunds = refund_scenarios(ctx, servers, plan)
        local = in_process(
            servers.provider_url,
            payers[-1],
            sku=SKU,
            iterations=QUICK_PHASE_ITERATIONS if ctx.options.quick else PHASE_ITERATIONS,
        )
    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        throughputs=[
            pay.throughput,
            replay.throughput,
            refund.throughput,
            refund_replay.throughput,
        ],
        metrics=[
            *throughput_metrics(pay, replay),
            Metric(
                "refund_replay_vs_first",
                "refund replay / first-time req/s",
                ratio(refund_replay.throughput.per_second, refund.throughput.per_second),
                "x",
            ),
            Metric(
                "refund_out_of_orders",
                "clients that ran out of paid orders to refund",
                refunds.out_of_orders(),
                note="the refund scenario refunds what the pay scenario paid; "
                "a client out of them stops early and its rate is low",
            ),
            *query_metrics(local, pinned_constant(QUERY_BUDGET_TEST.read_text(), "PAY_QUERIES")),
            *check_metrics(plan),
        ],
        sections=[
            phases_section(local.timed),
            sql_section("SQL of one pay (shop side)", local.pay_sql),
            sql_section("SQL of one sandbox charge (provider side)", local.sandbox_sql),
        ],
    )


# --- Figures --------------------------------------------------------------------------


def throughput_metrics(pay: Loaded, replay: Loaded) -> list[Metric]:
    per_pay = ratio(pay.provider_cpu * 1000, pay.throughput.per_second)
    return [
        Metric(
            "pay_replay_vs_first",
            "pay replay / first-time req/s",
            ratio(replay.throughput.per_second, pay.throughput.per_second),
            "x",
        ),
        Metric(
            "pay_provider_cpu_ms",
            "provider gunicorn CPU ms per pay",
            per_pay,
            "ms",
            note=f"{fmt(pay.provider_cpu, 2)} cores; the shop's own is in the table above",
        ),
    ]


def query_metrics(local: InProcess, pinned: int | None) -> list[Metric]:
    match = "n/a" if pinned is None else ("matches" if pinned == local.pay_sql.total else "DIFFERS")
    return [
        Metric(
            "queries_pay",
            "SQL statements, one pay (shop side)",
            local.pay_sql.total,
            note=f"{match} PAY_QUERIES",
        ),
        Metric(
            "queries_pay_pinned",
            "PAY_QUERIES in tests/payments/test_query_budget.py",
            math.nan if pinned is None else pinned,
        ),
        Metric(
            "queries_pay_replay",
            "SQL statements, pay replay",
            local.replay_sql.total,
            target=Target("<=", 2),
            note="authentication + the key lookup",
        ),
        Metric(
            "queries_sandbox_charge",
            "SQL statements, one sandbox charge (provider side)",
            local.sandbox_sql.total,
        ),
        Metric("ms_pay", "ms per pay (1 thread, in-process)", local.timed.ms_per_request, "ms"),
        Metric("ms_pay_replay", "ms per pay replay (1 thread)", local.replay_ms, "ms"),
        Metric(
            "ms_sandbox_charge",
            "ms per sandbox charge (1 thread, in-process)",
            local.sandbox_ms,
            "ms",
            note="the provider's work inside a pay, without HTTP",
        ),
        Metric(
            "ms_provider_call_new_connection",
            "ms per provider call, new connection (as the shop)",
            local.new_connection_ms,
            "ms",
            note="a 404 query: one indexed lookup at the sandbox",
        ),
        Metric(
            "ms_provider_call_kept_connection",
            "ms per provider call, connection kept alive",
            local.kept_connection_ms,
            "ms",
        ),
    ]


def check_metrics(plan: PayPlan) -> list[Metric]:
    """What makes the figures trustworthy: nobody starved, nothing left unresolved."""
    return [
        Metric(
            "pay_out_of_orders",
            "clients that ran out of orders",
            plan.out_of_orders(),
            target=Target("<=", 0),
            note=f"{len(plan.orders[0])} pre-created each",
        ),
        Metric(
            "pay_unsettled",
            "attempts left PENDING or UNKNOWN",
            unsettled_payments(),
            target=Target("<=", 0),
            note="non-zero: a provider call failed or timed out",
        ),
    ]


SUITE = Suite(name="pay", title="Paying an order (POST /api/v1/orders/{number}/pay/)", run=run)
