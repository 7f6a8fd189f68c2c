"""Order creation: what the idempotency layer costs, and what a replay saves.

Scenarios, each with 16 keep-alive clients against gunicorn on the bench database:

* **first-time**: every request a fresh Idempotency-Key, so every request creates
  an order (the full path: record insert, order, stock, line, movement, stored
  response, all in one transaction);
* **replay**: the same keys re-sent after their orders exist, so every request is
  answered from the stored record without touching the order tables;
* **layer off**: first-time creation on a second gunicorn started with
  ``IDEMPOTENCY_ENABLED=false`` (the header is still required; the unique
  (user, idempotency_key) index on orders still holds);
* **raw SQL**: pgbench running the same writes as one plain transaction, the
  ceiling for this machine (``bench/orders_sql.py``).

Then, in-process (``bench/orders_inprocess.py``): the SQL of each kind of
request, single-request service times and a pyinstrument profile.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

from bench import orders_inprocess, pgbench, pgsessions
from bench.appserver import Server
from bench.context import BenchContext, Suite, SuiteResult
from bench.harness import HttpRequest, RequestFactory, drive, measure
from bench.inprocess import QueryCount
from bench.orders_inprocess import ServiceTimes
from bench.orders_sql import OrderFixture, order_create_script
from bench.stats import Metric, Target, Throughput, ratio
from orders.models import Product
from orders.services import product_create

PATH = orders_inprocess.PATH
SKU = "BENCH-1"
PRICE = 1999
# Far more than any run can sell (a few hundred orders a second for a minute),
# so no request ever meets out-of-stock.
STOCK = 10**9
BODY = json.dumps({"lines": [{"sku": SKU, "quantity": 1}]}).encode()
# Keys created before the replay scenario, per client; each client cycles through its own.
REPLAY_KEYS_PER_CLIENT = 32
REPLAY_KEYS_PER_CLIENT_QUICK = 8
PRECREATE_LIMIT_S = 120.0

REPLAY_TARGET = Target(">=", 2.5)
OVERHEAD_TARGET = Target(">=", 0.9)  # layer on / layer off: at most 10 % slower
REPLAY_QUERY_TARGET = Target("<=", 2)


# --- Requests ---------------------------------------------------------------------------


def order_request(*, token: str, key: str, replayed: bool) -> HttpRequest:
    return HttpRequest(
        method="POST",
        path=PATH,
        body=BODY,
        headers={
            "Authorization": f"Token {token}",
            "Content-Type": "application/json",
            "Idempotency-Key": key,
        },
        expect_headers={"Idempotent-Replayed": "true" if replayed else "false"},
    )


def fresh_keys(token: str) -> RequestFactory:
    """Every request a new order: a new high-entropy key each time, as a client should."""
    return lambda _client, _n: order_request(token=token, key=str(uuid.uuid4()), replayed=False)


def replays(token: str, keys: list[list[str]]) -> RequestFactory:
    """Client i re-sends its own finished keys, round and round."""
    return lambda client, n: order_request(
        token=token, key=keys[client][n % len(keys[client])], replayed=True
    )


def precreate(ctx: BenchContext, server: Server) -> list[list[str]]:
    """Create the orders the replay scenario re-sends; refuse to go on if any failed."""
    per_client = REPLAY_KEYS_PER_CLIENT_QUICK if ctx.options.quick else REPLAY_KEYS_PER_CLIENT
    keys = [[str(uuid.uuid4()) for _ in range(per_client)] for _ in range(ctx.options.clients)]

    def factory(client: int, n: int) -> HttpRequest | None:
        if n >= per_client:
            return None
        return order_request(token=ctx.token, key=keys[client][n], replayed=False)

    run = drive(
        port=server.port, factory=factory, clients=ctx.options.clients, seconds=PRECREATE_LIMIT_S
    )
    wanted = per_client * ctx.options.clients
    created = sum(1 for sample in run.samples if sample.status == 201)
    if created != wanted:
        raise RuntimeError(f"pre-creating replay keys: {created} orders created of {wanted}")
    return keys


# --- Scenarios ----------------------------------------------------------------------------


def seed(ctx: BenchContext) -> OrderFixture:
    product = product_create(sku=SKU, name="Bench tea", price=PRICE, currency="CNY", stock=STOCK)
    return OrderFixture(
        user_id=ctx.user_id,
        product_id=product.pk,
        sku=product.sku,
        price=product.price,
        currency=product.currency,
        path=PATH,
    )


def http_scenarios(ctx: BenchContext) -> list[Throughput]:
    """First-time and replay on one gunicorn, then first-time on one with the layer off."""
    with ctx.server("layer-on") as server:
        first = measure(
            name="order_create_first",
            label="orders: first-time creation",
            server=server,
            factory=fresh_keys(ctx.token),
            plan=ctx.drive,
            database_url=ctx.database_url,
        )
        keys = precreate(ctx, server)
        replay = measure(
            name="order_create_replay",
            label="orders: replay (same key again)",
            server=server,
            factory=replays(ctx.token, keys),
            plan=ctx.drive,
            database_url=ctx.database_url,
        )
    with ctx.server("layer-off", IDEMPOTENCY_ENABLED="false") as server:
        off = measure(
            name="order_create_layer_off",
            label="orders: first-time, key layer off",
            server=server,
            factory=fresh_keys(ctx.token),
            plan=ctx.drive,
            database_url=ctx.database_url,
        )
    return [first, replay, off]


def raw_sql(ctx: BenchContext, fixture: OrderFixture) -> Throughput:
    """pgbench with the same writes: a short unmeasured warm-up, then the measured run."""
    script = ctx.out_dir / "order-create.sql"
    script.write_text(order_create_script(fixture))
    plan = pgbench.PgbenchPlan(
        clients=ctx.options.clients, threads=2, seconds=max(1, round(ctx.options.measure_s))
    )
    warmup = pgbench.PgbenchPlan(clients=ctx.options.clients, threads=2, seconds=1)
    pgbench.run(url=ctx.database_url, script=script, plan=warmup)
    with pgsessions.watch(ctx.database_url) as sessions:
        result = pgbench.measure(
            name="order_create_raw_sql",
            label="raw SQL: same writes (pgbench)",
            url=ctx.database_url,
            script=script,
            plan=plan,
            log_dir=ctx.out_dir / "pgbench-log",
        )
    return replace(result, pg_sessions=sessions.means())


# --- Figures --------------------------------------------------------------------------------


def throughput_metrics(
    first: Throughput, replay: Throughput, off: Throughput, raw: Throughput
) -> list[Metric]:
    return [
        Metric(
            "replay_vs_first",
            "replay / first-time req/s",
            ratio(replay.per_second, first.per_second),
            "x",
            REPLAY_TARGET,
        ),
        Metric(
            "layer_on_vs_off",
            "key layer on / off req/s",
            ratio(first.per_second, off.per_second),
            "x",
            OVERHEAD_TARGET,
            "overhead = 1 - value",
        ),
        Metric(
            "first_vs_raw_sql",
            "first-time req/s / raw SQL tps",
            ratio(first.per_second, raw.per_second),
            "x",
            note="share of the ceiling the app reaches",
        ),
    ]


def inprocess_metrics(first: QueryCount, replay: QueryCount, times: ServiceTimes) -> list[Metric]:
    return [
        Metric(
            "queries_first",
            "SQL statements, first-time creation",
            first.total,
            note="BEGIN and COMMIT included",
        ),
        Metric(
            "queries_replay_beyond_auth",
            "SQL statements, replay, beyond authentication",
            replay.beyond_auth,
            target=REPLAY_QUERY_TARGET,
            note=f"{replay.total} in all",
        ),
        Metric("ms_first", "ms per first-time creation (1 thread)", times.first_ms, "ms"),
        Metric("ms_layer_off", "ms per creation, layer off (1 thread)", times.layer_off_ms, "ms"),
        Metric("ms_replay", "ms per replay (1 thread)", times.replay_ms, "ms"),
        Metric(
            "layer_on_vs_off_single",
            "key layer on / off, 1 thread",
            ratio(times.layer_off_ms, times.first_ms),
            "x",
            note="the same ratio without concurrency: less noise",
        ),
    ]


def run(ctx: BenchContext) -> SuiteResult:
    fixture = seed(ctx)
    first, replay, off = http_scenarios(ctx)
    raw = raw_sql(ctx, fixture)

    post = orders_inprocess.order_poster(token=ctx.token, sku=SKU)
    first_sql, replay_sql = orders_inprocess.query_counts(post)
    times = orders_inprocess.service_times(post, iterations=ctx.options.profile_iterations)
    profiled = orders_inprocess.profile_first_time(
        post,
        iterations=ctx.options.profile_iterations,
        out_path=ctx.out_dir / "profile-order-create.txt",
    )
    stock_left = Product.objects.get(pk=fixture.product_id).stock

    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        throughputs=[first, replay, off, raw],
        metrics=[
            *throughput_metrics(first, replay, off, raw),
            *inprocess_metrics(first_sql, replay_sql, times),
            Metric("stock_left", f"stock left of {STOCK:,}", stock_left, note="never runs out"),
        ],
        sections=[
            orders_inprocess.profile_section(profiled),
            orders_inprocess.sql_section("SQL of one first-time creation", first_sql),
            orders_inprocess.sql_section("SQL of one replay", replay_sql),
        ],
    )


SUITE = Suite(name="orders", title="Order creation (POST /api/v1/orders/)", run=run)
