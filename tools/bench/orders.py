"""Order creation: what the idempotency layer costs, and what a replay saves.

16 keep-alive clients, each buying its own product, against gunicorn: first-time
creation, replay, the same with the key layer off, the framework floor (one
indexed read behind the same auth and throttle), and for context a hot product
all 16 clients buy; the same writes as raw SQL through pgbench (the ceiling);
then in-process the SQL of each kind of request, service times and
instructions (``tools/bench/keylayer.py``) and a profile. docs/benchmarks.md has why.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sysconfig
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from orders.models import Product
from tools.bench import ROOT, keylayer
from tools.bench.appserver import Server
from tools.bench.context import BenchContext, Section, Suite, SuiteResult
from tools.bench.database import libpq_uri
from tools.bench.fixtures import PRICE, STOCK, seed_product
from tools.bench.harness import HttpRequest, RequestFactory, drive, keyed_post, watch_sessions
from tools.bench.inprocess import count_queries, sql_section
from tools.bench.markdown import fmt, table
from tools.bench.stats import Figure, Sample, Target, Throughput, figures, ratio, summarize

PATH = keylayer.PATH
SKU_PREFIX = "BENCH-"  # the spread catalogue: BENCH-1 ... BENCH-<clients>
HOT_SKU = "BENCH-HOT"
# Keys created before the replay scenario, per client; each client cycles through its own.
REPLAY_KEYS_PER_CLIENT, REPLAY_KEYS_PER_CLIENT_QUICK = 32, 8
PRECREATE_LIMIT_S = 120.0

REPLAY_TARGET = Target(">=", 2.5)
# Layer on, layer off, on, off, ...: how many times each in the end-to-end comparison.
ALTERNATIONS = 3
OVERHEAD_TARGET = Target(">=", 0.9)  # layer on / layer off: at most 10 % slower
REPLAY_SQL = Target("<=", 1)  # beyond authentication: the key lookup

# (name, label, numerator, denominator, target): the targets are judged on the spread
# catalogue; the hot product is context.
RATIOS = (
    ("replay_vs_first", "replay / first-time req/s", "replay", "first", REPLAY_TARGET),
    ("layer_on_vs_off", "key layer on / off req/s", "first", "off", OVERHEAD_TARGET),
    ("first_vs_floor", "first-time req/s / framework floor req/s", "first", "floor", None),
    ("replay_vs_floor", "replay req/s / framework floor req/s", "replay", "floor", None),
    ("ceiling_vs_floor", "server ceiling req/s / framework floor req/s", "ceiling", "floor", None),
    ("replay_vs_ceiling", "replay req/s / server ceiling req/s", "replay", "ceiling", None),
    ("first_vs_raw_sql", "first-time req/s / raw SQL tps", "first", "raw", None),
    ("hot_layer_on_vs_off", "hot product: key layer on / off req/s", "hot_first", "hot_off", None),
    ("hot_vs_spread", "hot product / own product first-time req/s", "hot_first", "first", None),
)
FIGURES: tuple[Figure, ...] = (
    ("queries_first", "SQL statements, first-time creation", "", None),
    ("queries_replay_beyond_auth", "SQL statements, replay, beyond authentication", "", REPLAY_SQL),
    ("ms_first", "ms per first-time creation (1 thread)", "ms", None),
    ("ms_layer_off", "ms per creation, layer off (1 thread)", "ms", None),
    ("ms_replay", "ms per replay (1 thread)", "ms", None),
    ("layer_on_vs_off_single", "key layer on / off, 1 thread", "x", None),
)
# Instructions per request under callgrind: the figure load from elsewhere cannot move.
INSTRUCTIONS: tuple[Figure, ...] = (
    ("kinstr_first", "k instructions per first-time creation", "", None),
    ("kinstr_layer_off", "k instructions per creation, layer off", "", None),
    ("kinstr_replay", "k instructions per replay", "", None),
    ("layer_on_vs_off_instructions", "key layer on / off, instructions", "x", OVERHEAD_TARGET),
)
NO_VALGRIND: tuple[Figure, ...] = (("instructions", "instructions per request", "", None),)
STOCK_LEFT: Figure = ("stock_left", f"least stock left of {STOCK:,}", "", None)
NOTES = {
    "instructions": "no valgrind",
    "stock_left": "never runs out",
    "layer_on_vs_off": "overhead = 1 - value",
    "first_vs_floor": "the floor: same auth and throttle, one indexed read",
    "ceiling_vs_floor": "the most any answer could be over the floor on this server",
    "replay_vs_ceiling": "the ceiling: GET /healthz, answered by the first middleware",
    "first_vs_raw_sql": "share of the ceiling the app reaches",
    "hot_layer_on_vs_off": "context: lock-bound, no target",
    "hot_vs_spread": "what queueing on one row costs",
    "queries_first": "BEGIN and COMMIT included",
    "layer_on_vs_off_single": "the same ratio without concurrency: less noise",
    "layer_on_vs_off_instructions": "callgrind, one request at a time: the figure to judge "
    "the layer on",
}
HOT_NOTE = (
    "It is slower because every creation takes the same product's row lock with its "
    "conditional stock UPDATE and holds it until COMMIT, so the 16 clients' transactions "
    "queue on that lock (see PG lock wait) and finish one at a time."
)


def order_request(*, token: str, key: str, sku: str, replayed: bool) -> HttpRequest:
    body = keylayer.order_body(sku).encode()
    return keyed_post(PATH, body, token=token, key=key, replayed=replayed)


def order_requests(
    token: str, skus: list[str], keys: list[list[str]] | None = None, *, replayed: bool = False
) -> Callable[[int, int], HttpRequest]:
    """Client i buys ``skus[i]`` (all the same one when there is one SKU), with a new
    high-entropy key each time, as a client should, or with its own ``keys`` in turn,
    round and round (a replay re-sends them: same key, same body)."""

    def factory(client: int, n: int) -> HttpRequest:
        key = keys[client][n % len(keys[client])] if keys else str(uuid.uuid4())
        sku = skus[client % len(skus)]
        return order_request(token=token, key=key, sku=sku, replayed=replayed)

    return factory


def key_reads(token: str, keys: list[list[str]]) -> RequestFactory:
    """The framework floor: ``GET /api/v1/idempotency-keys/{key}/`` (each client its own)."""
    return lambda client, n: HttpRequest(
        method="GET",
        path=f"/api/v1/idempotency-keys/{keys[client][n % len(keys[client])]}/",
        headers={"Authorization": f"Token {token}"},
    )


def liveness(client: int, n: int) -> HttpRequest:
    """The server's ceiling: ``GET /healthz``, answered before any other middleware."""
    return HttpRequest(method="GET", path="/healthz")


def precreate(ctx: BenchContext, server: Server, skus: list[str]) -> list[list[str]]:
    """Create the orders the replay scenario re-sends; refuse to go on if any failed."""
    per_client = REPLAY_KEYS_PER_CLIENT_QUICK if ctx.options.quick else REPLAY_KEYS_PER_CLIENT
    keys = [[str(uuid.uuid4()) for _ in range(per_client)] for _ in range(ctx.options.clients)]
    orders = order_requests(ctx.token, skus, keys)
    run = drive(
        port=server.port,
        factory=lambda client, n: orders(client, n) if n < per_client else None,
        clients=ctx.options.clients,
        seconds=PRECREATE_LIMIT_S,
    )
    created, wanted = sum(1 for s in run.samples if s.status == 201), per_client * len(keys)
    if created != wanted:
        raise RuntimeError(f"pre-creating replay keys: {created} orders created of {wanted}")
    return keys


def http_scenarios(ctx: BenchContext, spread: list[str]) -> dict[str, Throughput]:
    """Both gunicorns up at once, so each layer-on figure is measured right next to
    its layer-off twin (load from elsewhere drifts; adjacent runs see the same)."""
    token, hot, figures = ctx.token, [HOT_SKU], {}
    with (
        ctx.server("layer-on") as on,
        ctx.server("layer-off", IDEMPOTENCY_ENABLED="false") as off,
    ):
        for key, server, name, label, skus in (
            ("first", on, "order_create_first", "orders: first-time (own product)", spread),
            ("off", off, "order_create_layer_off", "orders: first-time, layer off", spread),
            ("hot_first", on, "order_create_hot", "hot product: first-time", hot),
            (
                "hot_off",
                off,
                "order_create_hot_layer_off",
                "hot product: first-time, layer off",
                hot,
            ),
        ):
            figures[key] = ctx.measure(server, name, label, order_requests(token, skus))
        # The layer's cost as a user sees it: the two servers taken in turn, ALTERNATIONS
        # times each, so a burst of load from elsewhere hits both alike; CPU counted on
        # both sides of the connection to PostgreSQL (the server's and its backends').
        for round_ in range(ALTERNATIONS):
            for mode, server in (("on", on), ("off", off)):
                name, label = f"order_create_alt_{mode}_{round_ + 1}", f"alternated, layer {mode}"
                figures[f"alt_{mode}_{round_ + 1}"] = ctx.measure(
                    server, name, f"{label} ({round_ + 1})", order_requests(token, spread)
                )
        keys = precreate(ctx, on, spread)
        label = "orders: replay (same key again)"
        figures["replay"] = ctx.measure(
            on, "order_create_replay", label, order_requests(token, spread, keys, replayed=True)
        )
        label = "framework floor: GET /api/v1/idempotency-keys/{key}/"
        figures["floor"] = ctx.measure(on, "framework_floor", label, key_reads(token, keys))
        # What this server answers at most: no database, no Redis, no view, one middleware.
        label = "server ceiling: GET /healthz"
        figures["ceiling"] = ctx.measure(on, "server_ceiling", label, liveness)
    return figures


# --- Raw SQL: the same writes through pgbench -------------------------------------------------
#
# The rows the app writes, in the same order, against the same tables: the order,
# its line and inventory movement, the stock taken with a conditional UPDATE (last,
# as ``order_create`` does), then the key record with its answer. What the app does
# on top (authentication, the key lookup, reading the product, serialization, HTTP)
# is exactly what this ceiling leaves out. pgbench (C, prepared statements, no ORM)
# reaches what the app can approach, never pass, for these writes on this machine.
#
# Unique values come from ``pg_current_xact_id()``: the 64-bit transaction id is
# never reused, so the record's (user, key), the order's (user, idempotency_key)
# and its ``number`` never collide, without an extra round trip for a sequence.

# pgbench reads ":name" as a variable even inside a string literal, so the JSON
# we embed uses ": " (a colon followed by a space is left alone).
_JSON_SEPARATORS = (", ", ": ")
_SAFE_LITERAL = re.compile(r"[A-Za-z0-9_.\-/ ]+")
FINGERPRINT = "repeat('0', 64)"  # a SHA-256 hex digest's size; its value does not matter
# The same value at every use inside one transaction (the id is assigned on first use).
KEY_SQL = "'pgbench-' || pg_current_xact_id()"
NUMBER_SQL = "'PGB-' || pg_current_xact_id()"
PGBENCH_THREADS = 2
PGBENCH_TIMEOUT_MARGIN_S = 60  # pgbench stops itself after -T; this bounds a hung server
_TPS = re.compile(r"^tps = ([0-9.]+) \((?:without|excluding)", re.MULTILINE)
_FAILED = re.compile(r"^number of failed transactions: (\d+)", re.MULTILINE)


@dataclass(frozen=True)
class OrderFixture:
    """The seeded rows the script writes against: ``products`` products with
    consecutive ids from ``first_product_id`` and SKUs ``<sku_prefix>1``, ``2``, ...
    pgbench client ``c`` (its ``:client_id``, from 0) buys the ``c % products``-th."""

    user_id: int
    first_product_id: int
    products: int
    sku_prefix: str
    price: int
    currency: str
    path: str = PATH


def _literal(value: str) -> str:
    if not _SAFE_LITERAL.fullmatch(value):
        raise ValueError(f"refusing to embed {value!r} in SQL")
    return f"'{value}'"


def _json_sql(value: object, sku: str) -> str:
    """SQL text building ``value`` as JSON, with @NUMBER@ and @SKU@ filled in by SQL."""
    text = json.dumps(value, separators=_JSON_SEPARATORS).replace("'", "''")
    text = text.replace("@NUMBER@", f"' || {NUMBER_SQL} || '").replace("@SKU@", f"' || {sku} || '")
    return f"('{text}')"


def order_create_script(fixture: OrderFixture) -> str:
    """The pgbench script: one transaction = the writes of one order creation."""
    if fixture.products < 1:
        raise ValueError("at least one product is needed")
    currency, path = _literal(fixture.currency), _literal(fixture.path)
    sku = f"{_literal(fixture.sku_prefix)} || :sku_number"
    body = {  # a stored answer shaped like the app's, as text: the JSON exactly as sent
        "number": "@NUMBER@",
        "status": "UNPAID",
        "amount": fixture.price,
        "currency": fixture.currency,
        "lines": [{"sku": "@SKU@", "unit_price": fixture.price, "quantity": 1}],
        "created_at": "2026-01-01T00:00:00.000000Z",
        "paid_at": None,
    }
    headers = _json_sql({"Location": f"{fixture.path}@NUMBER@/"}, sku)
    return f"""\
-- Generated by tools/bench/orders.py: the writes of one first-time order creation.
\\set user_id {fixture.user_id:d}
\\set slot :client_id % {fixture.products:d}
\\set product_id {fixture.first_product_id:d} + :slot
\\set sku_number :slot + 1
\\set price {fixture.price:d}
BEGIN;
INSERT INTO orders_order
    (number, user_id, status, amount, refunded_amount, currency, idempotency_key, created_at)
    VALUES ({NUMBER_SQL}, :user_id, 'UNPAID', :price, 0, {currency}, {KEY_SQL}, now())
    RETURNING id AS order_id \\gset
INSERT INTO orders_orderline (order_id, product_id, sku, unit_price, quantity)
    VALUES (:order_id, :product_id, {sku}, :price, 1);
INSERT INTO orders_inventorymovement (product_id, order_id, kind, quantity, created_at)
    VALUES (:product_id, :order_id, 'RESERVE', -1, now());
UPDATE orders_product SET stock = stock - 1 WHERE id = :product_id AND stock >= 1;
INSERT INTO idempotency_idempotencykey
    (user_id, key, fingerprint, method, path, recovery_point, response_status,
     response_body, response_headers, resource_type, resource_id, created_at, finished_at)
    VALUES (:user_id, {KEY_SQL}, {FINGERPRINT}, 'POST', {path}, 'finished', 201,
     {_json_sql(body, sku)}, CAST({headers} AS jsonb), 'order', :order_id, now(), now());
COMMIT;
"""


def find_pgbench() -> str:
    """pgbench from PATH, else the one shipped with the embedded server (pgserver)."""
    if found := shutil.which("pgbench"):
        return found
    import pgserver

    shipped = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench"
    if shipped.exists():
        return str(shipped)
    raise RuntimeError("pgbench not found: install postgresql-client or pgserver")


def pgbench_command(
    pgbench: str, url: str, script: Path, clients: int, seconds: int, log_prefix: Path | None
) -> list[str]:
    """No vacuum (our tables are not pgbench's), prepared statements, time-bounded;
    with ``log_prefix``, one log line per transaction with its latency (percentiles)."""
    args = [pgbench, "-n", "-M", "prepared", "-c", str(clients), "-j", str(PGBENCH_THREADS)]
    args += ["-T", str(seconds), "-f", str(script)]
    if log_prefix is not None:
        args += ["-l", f"--log-prefix={log_prefix}"]
    return [*args, libpq_uri(url)]  # a URI works as the dbname argument, sockets included


def parse_tps(output: str) -> float:
    if (match := _TPS.search(output)) is None:
        raise ValueError(f"no tps line in pgbench output:\n{output}")
    return float(match.group(1))


def parse_failed(output: str) -> int:
    match = _FAILED.search(output)
    return int(match.group(1)) if match else 0


def parse_log(lines: Iterable[str]) -> list[float]:
    """Latencies (seconds) of the committed transactions in pgbench ``-l`` log lines:
    ``client_id transaction_no time ...``, ``time`` in µs (or ``failed``/``skipped``)."""
    fields = (line.split() for line in lines)
    return [int(f[2]) / 1_000_000 for f in fields if len(f) >= 3 and f[2].isdigit()]


def pgbench(url: str, script: Path, clients: int, seconds: int, log: Path | None = None) -> str:
    """Run pgbench to completion; return its report (stdout)."""
    command = pgbench_command(find_pgbench(), url, script, clients, seconds, log)
    timeout = seconds + PGBENCH_TIMEOUT_MARGIN_S
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pgbench failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def raw_sql(ctx: BenchContext, fixture: OrderFixture) -> Throughput:
    """pgbench with the same writes: 1 s unmeasured, then the measured run. Its tps
    (connection set-up excluded) is the throughput; its log gives the percentiles."""
    name, clients = "order_create_raw_sql", ctx.options.clients
    script, log_dir = ctx.out_dir / "order-create.sql", ctx.out_dir / "pgbench-log"
    script.write_text(order_create_script(fixture))
    pgbench(ctx.database_url, script, clients, seconds=1)
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob(f"{name}*"):
        old.unlink()
    seconds = max(1, round(ctx.options.measure_s))
    with watch_sessions(ctx.database_url) as sessions:
        output = pgbench(ctx.database_url, script, clients, seconds, log_dir / name)
    latencies = []
    for log_file in sorted(log_dir.glob(f"{name}.*")):
        with log_file.open() as lines:
            latencies += parse_log(lines)
    samples = [Sample(finished_at=0.0, latency_s=latency, status=200) for latency in latencies]
    label = "raw SQL: same writes, own product (pgbench)"
    return replace(
        summarize(name=name, label=label, samples=samples, seconds=seconds),
        per_second=parse_tps(output),
        errors=parse_failed(output),
        statuses={},
        connections=clients,
        pg_sessions=sessions.means(),
    )


# --- The profile of one request ---------------------------------------------------------------
#
# Two views of the same pyinstrument samples. By layer: each sample is charged to
# its innermost frame outside the standard library, classified by package
# (psycopg = waiting on PostgreSQL, ...), so time in ``json`` or ``socket`` goes
# to whoever called them. By step: the share of samples inside named functions;
# steps nest, so these do not add up.

PROFILE_INTERVAL_S = 0.0005  # a few thousand samples over a few hundred requests
TREE_LINES, FLAT_LINES = 40, 25
_STDLIB = tuple(p for key in ("stdlib", "platstdlib") if (p := sysconfig.get_paths().get(key)))
# (label, fragment of the frame's file path), first match wins.
LAYERS: Sequence[tuple[str, str]] = (
    ("PostgreSQL round trips (psycopg: send, wait, fetch)", "/psycopg"),
    ("Redis (DRF throttle counter, cache client)", "/redis/"),
    ("Django ORM (query building, SQL compiling, model instances)", "/django/db/"),
    ("DRF (request, auth/throttle/serializer machinery, rendering)", "/rest_framework/"),
    ("Django request handling (middleware, test client, http)", "/django/"),
    ("profiler overhead", "/pyinstrument/"),
    ("other libraries", "/site-packages/"),
    ("OnceShop code (idempotency/, orders/, config/)", str(ROOT)),
)


# A named function whose inclusive time is worth reporting: (label, function, path fragment).
Step = tuple[str, str, str]


# In request order; "-" marks the steps inside the atomic phase.
STEPS: tuple[Step, ...] = (
    ("DRF view, whole (APIView.dispatch)", "dispatch", "rest_framework/views.py"),
    ("authentication (TokenAuthentication)", "authenticate", "rest_framework/authentication.py"),
    ("throttle (UserRateThrottle, Redis)", "allow_request", "rest_framework/throttling.py"),
    ("body validation (InputSerializer)", "is_valid", "rest_framework/serializers.py"),
    ("key lookup (idempotency.core._acquire)", "_acquire", "idempotency/core.py"),
    ("atomic phase (idempotency.phases.atomic_phase)", "atomic_phase", "idempotency/phases.py"),
    ("- order_create service", "order_create", "orders/services.py"),
    ("- response body (OrderOutputSerializer.data)", "data", "rest_framework/serializers.py"),
    ("- transaction exits (savepoints, COMMIT)", "__exit__", "django/db/transaction.py"),
    ("response rendering (JSONRenderer)", "render", "rest_framework/renderers.py"),
)


# (label, seconds, share of all sampled time)
Share = tuple[str, float, float]


def _frame_parts(frame_info: str) -> tuple[str, str]:
    """(function, file path) of a pyinstrument frame identifier."""
    function, _, rest = frame_info.split("\x01", 1)[0].partition("\x00")
    return function, rest.partition("\x00")[0]


def layer_of(stack: Sequence[str]) -> str:
    """The layer a sample is charged to: its innermost frame outside the standard library."""
    for function_path in reversed(stack):  # leaf first
        _, path = _frame_parts(function_path)
        if not path or path.startswith("<"):  # <built-in>, <frozen importlib._bootstrap>
            continue
        if path.startswith(_STDLIB) and "site-packages" not in path:
            continue
        return next((label for label, fragment in LAYERS if fragment in path), "other")
    return "standard library"


def attribute(
    records: Sequence[tuple[Sequence[str], float]], steps: Sequence[Step]
) -> tuple[list[Share], list[Share]]:
    """Charge sampled time (stack, seconds) to layers and to steps."""
    by_layer: defaultdict[str, float] = defaultdict(float)
    by_step: defaultdict[str, float] = defaultdict(float)
    for stack, seconds in records:
        by_layer[layer_of(stack)] += seconds
        frames = [_frame_parts(frame) for frame in stack]
        for label, function, fragment in steps:
            if any(f == function and fragment in p for f, p in frames):
                by_step[label] += seconds
    total = sum(by_layer.values())

    def shares(times: dict[str, float]) -> list[Share]:
        ranked = sorted(times.items(), key=lambda item: item[1], reverse=True)
        return [(label, s, s / total if total else 0.0) for label, s in ranked]

    return shares(by_layer), shares(by_step)


def _without_banner(text: str) -> list[str]:
    """pyinstrument's text output minus its logo and header: the lines after "Profile at"."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Profile at")]
    return [line for line in lines[starts[0] + 1 :] if line.strip()] if starts else lines


def profile_section(call: Callable[[], object], *, iterations: int, out_path: Path) -> Section:
    """Profile ``iterations`` calls as one session; write the top of it to ``out_path``."""
    from pyinstrument import Profiler

    profiler = Profiler(interval=PROFILE_INTERVAL_S)
    profiler.start()
    try:
        for _ in range(iterations):
            call()
    finally:
        session = profiler.stop()
    tree = profiler.output_text(unicode=False, color=False, show_all=False)
    flat = profiler.output_text(unicode=False, color=False, show_all=False, flat=True)
    out_path.write_text(
        f"# {iterations} requests, {session.duration:.2f} s sampled every "
        f"{PROFILE_INTERVAL_S * 1000} ms\n"
        f"\n## Call tree (top {TREE_LINES} lines, library frames folded)\n\n"
        + "\n".join(_without_banner(tree)[:TREE_LINES])
        + f"\n\n## Functions by self time (top {FLAT_LINES})\n\n"
        + "\n".join(_without_banner(flat)[:FLAT_LINES])
        + "\n"
    )
    by_layer, by_step = attribute(session.frame_records, STEPS)

    def rows(shares: list[Share]) -> list[list[str]]:
        return [
            [label, fmt(s * 1000 / iterations, 2), fmt(share * 100)] for label, s, share in shares
        ]

    return Section(
        f"Where a first-time creation spends its time ({iterations} requests)",
        "In-process through Django's test client (no gunicorn, no socket), one request "
        f"at a time, under pyinstrument: {fmt(session.duration * 1000 / iterations, 2)} ms per "
        "request, the profiler's own overhead included (it inflates Python-heavy parts). Top "
        f"of the profile: `{os.path.relpath(out_path)}`.\n\n"
        + table(["by layer (innermost non-stdlib frame)", "ms/request", "%"], rows(by_layer))
        + "\n\n"
        + table(["by step (inclusive; steps nest)", "ms/request", "%"], rows(by_step)),
    )


END_TO_END: tuple[Figure, ...] = (
    (
        "e2e_layer_on_vs_off",
        "key layer on / off req/s, end to end (alternated)",
        "x",
        OVERHEAD_TARGET,
    ),
    ("e2e_cpu_off_vs_on", "key layer off / on CPU per request (server + PG)", "x", OVERHEAD_TARGET),
    ("e2e_cpu_ms_on", "CPU ms per creation, layer on (server + PG)", "ms", None),
    ("e2e_cpu_ms_off", "CPU ms per creation, layer off (server + PG)", "ms", None),
    ("e2e_pg_cpu_ms_on", "of which PostgreSQL, layer on", "ms", None),
    ("e2e_pg_cpu_ms_off", "of which PostgreSQL, layer off", "ms", None),
)


def end_to_end(http: dict[str, Throughput]) -> dict[str, float]:
    """The alternated rounds pooled: requests and CPU summed per mode, then compared."""
    pooled = {}
    for mode in ("on", "off"):
        rounds = [t for key, t in http.items() if key.startswith(f"alt_{mode}_")]
        seconds = sum(t.seconds for t in rounds)
        ok = sum(t.per_second * t.seconds for t in rounds)
        # CPU in cores over each whole run; weighted by the run's length like the requests.
        server = sum(t.server_cpu * t.seconds for t in rounds)
        database = sum(t.pg_cpu * t.seconds for t in rounds)
        pooled[mode] = (ok / seconds, (server + database) * 1000 / ok, database * 1000 / ok)
    (on_rate, on_cpu, on_pg), (off_rate, off_cpu, off_pg) = pooled["on"], pooled["off"]
    return {
        "e2e_layer_on_vs_off": ratio(on_rate, off_rate),
        "e2e_cpu_off_vs_on": ratio(off_cpu, on_cpu),
        "e2e_cpu_ms_on": on_cpu,
        "e2e_cpu_ms_off": off_cpu,
        "e2e_pg_cpu_ms_on": on_pg,
        "e2e_pg_cpu_ms_off": off_pg,
    }


def run(ctx: BenchContext) -> SuiteResult:
    # One product per client, with consecutive ids (pgbench derives its product
    # from its client id), then the hot product.
    spread = [seed_product(f"{SKU_PREFIX}{i + 1}") for i in range(ctx.options.clients)]
    ids = [product.pk for product in spread]
    if ids != list(range(ids[0], ids[0] + len(ids))):
        raise RuntimeError(f"bench products got non-consecutive ids {ids}")
    seed_product(HOT_SKU)
    skus = [product.sku for product in spread]
    http = http_scenarios(ctx, skus)
    fixture = OrderFixture(ctx.user_id, ids[0], len(ids), SKU_PREFIX, PRICE, "CNY")
    http["raw"] = raw_sql(ctx, fixture)
    per_second = {key: throughput.per_second for key, throughput in http.items()}
    values = {name: ratio(per_second[a], per_second[b]) for name, _, a, b, _ in RATIOS}
    values |= end_to_end(http)

    order = keylayer.order_poster(token=ctx.token, sku=skus[0])
    order(str(uuid.uuid4()))  # connection open, caches filled
    key = str(uuid.uuid4())
    first_sql, replay_sql = count_queries(lambda: order(key)), count_queries(lambda: order(key))
    iterations = ctx.options.profile_iterations
    ms = keylayer.service_times(order, iterations=iterations)
    values |= {
        "queries_first": first_sql.total,
        "queries_replay_beyond_auth": replay_sql.beyond_auth,
        "ms_first": ms["on"],
        "ms_layer_off": ms["off"],
        "ms_replay": ms["replay"],
        "layer_on_vs_off_single": ratio(ms["off"], ms["on"]),
        "instructions": math.nan,
    }
    counted = shutil.which("valgrind") and shutil.which("callgrind_control")
    if counted:
        k = keylayer.instructions_per_request(
            database_url=ctx.database_url, redis_url=ctx.redis_url
        )
        values |= {
            "kinstr_first": k["on"],
            "kinstr_layer_off": k["off"],
            "kinstr_replay": k["replay"],
            "layer_on_vs_off_instructions": ratio(k["off"], k["on"]),
        }
    profiled = profile_section(
        lambda: order(str(uuid.uuid4())),
        iterations=iterations,
        out_path=ctx.out_dir / "profile-order-create.txt",
    )
    values["stock_left"] = min(Product.objects.values_list("stock", flat=True))
    values |= keylayer.database_costs(order)
    specs = [*END_TO_END, *keylayer.DATABASE_COSTS]
    specs += [(name, label, "x", target) for name, label, _, _, target in RATIOS]
    specs += [*FIGURES, *(INSTRUCTIONS if counted else NO_VALGRIND), STOCK_LEFT]
    notes = {**NOTES, "queries_replay_beyond_auth": f"{replay_sql.total} in all"}
    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        throughputs=[
            http[k] for k in ("first", "replay", "off", "hot_first", "hot_off", "floor", "ceiling")
        ]
        + [http[k] for k in sorted(http) if k.startswith("alt_")]
        + [http["raw"]],
        metrics=figures(specs, values, notes),
        sections=[
            Section(title="Hot product (context)", markdown=HOT_NOTE),
            profiled,
            sql_section("SQL of one first-time creation", first_sql),
            sql_section("SQL of one replay", replay_sql),
        ],
    )


SUITE = Suite(name="orders", title="Order creation (POST /api/v1/orders/)", run=run)
