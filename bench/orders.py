"""Order creation: what the idempotency layer costs, and what a replay saves.

Scenarios, each with 16 keep-alive clients against gunicorn on the bench database.
In the main ones every client orders its own product (client i buys SKU
``BENCH-<i+1>``), as many customers buying many things do; the layer's cost is
judged on these:

* **first-time**: every request a fresh Idempotency-Key, so every request creates
  an order (the full path: record insert, order, line, movement, stock, stored
  response, all in one transaction);
* **replay**: the same keys re-sent after their orders exist, so every request is
  answered from the stored record without touching the order tables;
* **layer off**: first-time creation on a second gunicorn started with
  ``IDEMPOTENCY_ENABLED=false`` (the header is still required; the unique
  (user, idempotency_key) index on orders still holds);
* **raw SQL**: pgbench running the same writes as one plain transaction, each
  pgbench client on its own product too, the ceiling for this machine
  (``bench/orders_sql.py``).

For context, a **hot product** pair (layer on and off): all 16 clients order the
same SKU, so every creation queues on that product's row lock.

Then, in-process (``bench/orders_inprocess.py``): the SQL of each kind of
request, single-request service times and a pyinstrument profile.
"""

from __future__ import annotations

import json
import math
import shutil
import uuid
from dataclasses import dataclass, replace

from bench import keylayer, orders_inprocess, pgbench, pgsessions
from bench.appserver import Server
from bench.context import BenchContext, Section, Suite, SuiteResult
from bench.harness import HttpRequest, RequestFactory, drive, measure
from bench.inprocess import QueryCount
from bench.orders_inprocess import ServiceTimes
from bench.orders_sql import OrderFixture, order_create_script
from bench.stats import Metric, Target, Throughput, ratio
from orders.models import Product
from orders.services import product_create

PATH = orders_inprocess.PATH
SKU_PREFIX = "BENCH-"  # the spread catalogue: BENCH-1 ... BENCH-<clients>
HOT_SKU = "BENCH-HOT"
PRICE = 1999
# Far more than any run can sell (a few hundred orders a second for a minute),
# so no request ever meets out-of-stock.
STOCK = 10**9
# Keys created before the replay scenario, per client; each client cycles through its own.
REPLAY_KEYS_PER_CLIENT = 32
REPLAY_KEYS_PER_CLIENT_QUICK = 8
PRECREATE_LIMIT_S = 120.0

REPLAY_TARGET = Target(">=", 2.5)
OVERHEAD_TARGET = Target(">=", 0.9)  # layer on / layer off: at most 10 % slower
REPLAY_QUERY_TARGET = Target("<=", 1)

HOT_NOTE = (
    "It is slower because every creation takes the same product's row lock with its "
    "conditional stock UPDATE and holds it until COMMIT, so the 16 clients' transactions "
    "queue on that lock (see PG lock wait) and finish one at a time."
)


# --- Requests ---------------------------------------------------------------------------


def order_body(sku: str) -> bytes:
    return json.dumps({"lines": [{"sku": sku, "quantity": 1}]}).encode()


def order_request(*, token: str, key: str, sku: str, replayed: bool) -> HttpRequest:
    return HttpRequest(
        method="POST",
        path=PATH,
        body=order_body(sku),
        headers={
            "Authorization": f"Token {token}",
            "Content-Type": "application/json",
            "Idempotency-Key": key,
        },
        expect_headers={"Idempotent-Replayed": "true" if replayed else "false"},
    )


def client_sku(skus: list[str], client: int) -> str:
    """The SKU client ``client`` buys: its own when there are enough, else shared."""
    return skus[client % len(skus)]


def fresh_keys(token: str, skus: list[str]) -> RequestFactory:
    """Every request a new order: a new high-entropy key each time, as a client should."""
    return lambda client, _n: order_request(
        token=token, key=str(uuid.uuid4()), sku=client_sku(skus, client), replayed=False
    )


def replays(token: str, skus: list[str], keys: list[list[str]]) -> RequestFactory:
    """Client i re-sends its own finished keys (same body: same SKU), round and round."""
    return lambda client, n: order_request(
        token=token,
        key=keys[client][n % len(keys[client])],
        sku=client_sku(skus, client),
        replayed=True,
    )


def precreate(ctx: BenchContext, server: Server, skus: list[str]) -> list[list[str]]:
    """Create the orders the replay scenario re-sends; refuse to go on if any failed."""
    per_client = REPLAY_KEYS_PER_CLIENT_QUICK if ctx.options.quick else REPLAY_KEYS_PER_CLIENT
    keys = [[str(uuid.uuid4()) for _ in range(per_client)] for _ in range(ctx.options.clients)]

    def factory(client: int, n: int) -> HttpRequest | None:
        if n >= per_client:
            return None
        return order_request(
            token=ctx.token, key=keys[client][n], sku=client_sku(skus, client), replayed=False
        )

    run = drive(
        port=server.port, factory=factory, clients=ctx.options.clients, seconds=PRECREATE_LIMIT_S
    )
    wanted = per_client * ctx.options.clients
    created = sum(1 for sample in run.samples if sample.status == 201)
    if created != wanted:
        raise RuntimeError(f"pre-creating replay keys: {created} orders created of {wanted}")
    return keys


# --- Scenarios ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Catalogue:
    """The seeded products: one per client (the spread catalogue), and the hot one."""

    spread: list[str]
    hot: str
    fixture: OrderFixture  # the pgbench script's view of the spread catalogue


def _product(sku: str) -> Product:
    return product_create(sku=sku, name="Bench tea", price=PRICE, currency="CNY", stock=STOCK)


def seed(ctx: BenchContext) -> Catalogue:
    """One product per client, with consecutive ids (pgbench derives its product from
    its client id), then the hot product."""
    spread = [_product(f"{SKU_PREFIX}{i + 1}") for i in range(ctx.options.clients)]
    ids = [product.pk for product in spread]
    if ids != list(range(ids[0], ids[0] + len(ids))):
        raise RuntimeError(f"bench products got non-consecutive ids {ids}")
    hot = _product(HOT_SKU)
    fixture = OrderFixture(
        user_id=ctx.user_id,
        first_product_id=ids[0],
        products=len(ids),
        sku_prefix=SKU_PREFIX,
        price=PRICE,
        currency="CNY",
        path=PATH,
    )
    return Catalogue(spread=[p.sku for p in spread], hot=hot.sku, fixture=fixture)


@dataclass(frozen=True)
class HttpFigures:
    first: Throughput
    off: Throughput
    replay: Throughput
    hot_first: Throughput
    hot_off: Throughput
    floor: Throughput

    def all(self) -> list[Throughput]:
        return [self.first, self.replay, self.off, self.hot_first, self.hot_off, self.floor]


def key_reads(token: str, keys: list[list[str]]) -> RequestFactory:
    """The framework floor: ``GET /api/v1/idempotency-keys/{key}/``, an authenticated,
    throttled DRF endpoint doing one indexed read (each client its own keys)."""
    return lambda client, n: HttpRequest(
        method="GET",
        path=f"/api/v1/idempotency-keys/{keys[client][n % len(keys[client])]}/",
        headers={"Authorization": f"Token {token}"},
    )


def http_scenarios(ctx: BenchContext, catalogue: Catalogue) -> HttpFigures:
    """Both gunicorns up at once, so each layer-on figure is measured right next to
    its layer-off twin (load from elsewhere drifts; adjacent runs see the same)."""

    def run(server: Server, name: str, label: str, factory: RequestFactory) -> Throughput:
        return measure(
            name=name,
            label=label,
            server=server,
            factory=factory,
            plan=ctx.drive,
            database_url=ctx.database_url,
        )

    spread, hot = catalogue.spread, [catalogue.hot]
    with (
        ctx.server("layer-on") as on,
        ctx.server("layer-off", IDEMPOTENCY_ENABLED="false") as off,
    ):
        first = run(
            on,
            "order_create_first",
            "orders: first-time (own product)",
            fresh_keys(ctx.token, spread),
        )
        layer_off = run(
            off,
            "order_create_layer_off",
            "orders: first-time, layer off",
            fresh_keys(ctx.token, spread),
        )
        hot_first = run(
            on, "order_create_hot", "hot product: first-time", fresh_keys(ctx.token, hot)
        )
        hot_off = run(
            off,
            "order_create_hot_layer_off",
            "hot product: first-time, layer off",
            fresh_keys(ctx.token, hot),
        )
        keys = precreate(ctx, on, spread)
        replay = run(
            on,
            "order_create_replay",
            "orders: replay (same key again)",
            replays(ctx.token, spread, keys),
        )
        floor = run(
            on,
            "framework_floor",
            "framework floor: GET /api/v1/idempotency-keys/{key}/",
            key_reads(ctx.token, keys),
        )
    return HttpFigures(
        first=first, off=layer_off, replay=replay, hot_first=hot_first, hot_off=hot_off, floor=floor
    )


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
            label="raw SQL: same writes, own product (pgbench)",
            url=ctx.database_url,
            script=script,
            plan=plan,
            log_dir=ctx.out_dir / "pgbench-log",
        )
    return replace(result, pg_sessions=sessions.means())


# --- Figures --------------------------------------------------------------------------------


def throughput_metrics(http: HttpFigures, raw: Throughput) -> list[Metric]:
    """The targets, judged on the spread catalogue; the hot product as context."""
    return [
        Metric(
            "replay_vs_first",
            "replay / first-time req/s",
            ratio(http.replay.per_second, http.first.per_second),
            "x",
            REPLAY_TARGET,
        ),
        Metric(
            "layer_on_vs_off",
            "key layer on / off req/s",
            ratio(http.first.per_second, http.off.per_second),
            "x",
            OVERHEAD_TARGET,
            "overhead = 1 - value",
        ),
        Metric(
            "first_vs_floor",
            "first-time req/s / framework floor req/s",
            ratio(http.first.per_second, http.floor.per_second),
            "x",
            note="the floor: same auth and throttle, one indexed read",
        ),
        Metric(
            "replay_vs_floor",
            "replay req/s / framework floor req/s",
            ratio(http.replay.per_second, http.floor.per_second),
            "x",
        ),
        Metric(
            "first_vs_raw_sql",
            "first-time req/s / raw SQL tps",
            ratio(http.first.per_second, raw.per_second),
            "x",
            note="share of the ceiling the app reaches",
        ),
        Metric(
            "hot_layer_on_vs_off",
            "hot product: key layer on / off req/s",
            ratio(http.hot_first.per_second, http.hot_off.per_second),
            "x",
            note="context: lock-bound, no target",
        ),
        Metric(
            "hot_vs_spread",
            "hot product / own product first-time req/s",
            ratio(http.hot_first.per_second, http.first.per_second),
            "x",
            note="what queueing on one row costs",
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


def instruction_metrics(ctx: BenchContext) -> list[Metric]:
    """Instructions per request under callgrind: the figure load from elsewhere cannot move."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        return [Metric("instructions", "instructions per request", math.nan, note="no valgrind")]
    counted = keylayer.instructions_per_request(
        database_url=ctx.database_url, redis_url=ctx.redis_url
    )
    return [
        Metric("kinstr_first", "k instructions per first-time creation", counted.layer_on),
        Metric("kinstr_layer_off", "k instructions per creation, layer off", counted.layer_off),
        Metric("kinstr_replay", "k instructions per replay", counted.replay),
        Metric(
            "layer_on_vs_off_instructions",
            "key layer on / off, instructions",
            ratio(counted.layer_off, counted.layer_on),
            "x",
            OVERHEAD_TARGET,
            "callgrind, one request at a time: the figure to judge the layer on",
        ),
    ]


def run(ctx: BenchContext) -> SuiteResult:
    catalogue = seed(ctx)
    http = http_scenarios(ctx, catalogue)
    raw = raw_sql(ctx, catalogue.fixture)

    post = orders_inprocess.order_poster(token=ctx.token, sku=catalogue.spread[0])
    first_sql, replay_sql = orders_inprocess.query_counts(post)
    times = orders_inprocess.service_times(post, iterations=ctx.options.profile_iterations)
    profiled = orders_inprocess.profile_first_time(
        post,
        iterations=ctx.options.profile_iterations,
        out_path=ctx.out_dir / "profile-order-create.txt",
    )
    stock_left = min(Product.objects.values_list("stock", flat=True))

    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        throughputs=[*http.all(), raw],
        metrics=[
            *throughput_metrics(http, raw),
            *inprocess_metrics(first_sql, replay_sql, times),
            *instruction_metrics(ctx),
            Metric(
                "stock_left",
                f"least stock left of {STOCK:,}",
                stock_left,
                note="never runs out",
            ),
        ],
        sections=[
            Section(title="Hot product (context)", markdown=HOT_NOTE),
            orders_inprocess.profile_section(profiled),
            orders_inprocess.sql_section("SQL of one first-time creation", first_sql),
            orders_inprocess.sql_section("SQL of one replay", replay_sql),
        ],
    )


SUITE = Suite(name="orders", title="Order creation (POST /api/v1/orders/)", run=run)
