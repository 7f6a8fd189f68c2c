"""The peers: OnceShop's key layer against the packages a Django developer finds first.

``python -m bench --suite peers``. The same order-creation endpoint, the same
database, Redis and gunicorn; only what answers a retry changes:

* **OnceShop**: its own layer (``IDEMPOTENCY_ENABLED=true``);
* **drf-idempotency 1.0** with its database backend, and with its Redis backend;
* **django-idempotency-key 1.3** with Django's Redis cache as storage and its
  multi-process Redis lock (its memory store and thread lock are per process:
  with gunicorn's 2 workers they would not see each other's keys).

For the packages the server runs with OnceShop's layer off, and the package's
middleware in front of the view (``bench/peer_settings.py``). The packages live
in a virtualenv of their own, ``.var/peers`` (created on first use from
``requirements.lock`` plus ``PEER_PACKAGES``); the app never imports them.

Per contender, with 16 keep-alive clients: first-time creation (a fresh key per
request) and replay (keys created just before, re-sent) in req/s, and then 100
identical requests at once (one key, one body, 100 connections released
together), counted in the database: orders made, and requests that reached the
view although another with the same key was already running. With the layer
off, OnceShop's own unique index on (user, key) of orders is still under the
view: a duplicate the package lets through is stopped there with 409
``idempotency-key-reused`` instead of making a second order, so those 409s are
what the package let through. Last, client 0's finished key is sent again by
another user and with no credentials at all: a 2xx there hands one customer's
stored answer to someone else.
"""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from http.client import HTTPConnection
from pathlib import Path

from bench import appserver
from bench.context import BenchContext, Section, Suite, SuiteResult
from bench.database import ROOT
from bench.fixtures import create_payers, seed_product
from bench.harness import HttpRequest, RequestFactory, measure
from bench.markdown import table
from bench.orders import order_request
from bench.stats import Metric, Throughput, ratio
from orders.models import Order

PEERS_VENV = ROOT / ".var" / "peers"
# Exact versions: the comparison is of these releases.
PEER_PACKAGES = ("drf-idempotency==1.0.0", "django-idempotency-key==1.3.0")
SKU_PREFIX = "PEER-"
REPLAY_KEYS_PER_CLIENT = 8
SAME_KEY_REQUESTS = 100
SAME_KEY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Contender:
    name: str  # BENCH_PEER, or "onceshop"
    label: str

    @property
    def is_onceshop(self) -> bool:
        return self.name == "onceshop"


CONTENDERS = (
    Contender("onceshop", "OnceShop (its own layer)"),
    Contender("drf-idempotency-db", "drf-idempotency 1.0, database backend"),
    Contender("drf-idempotency-redis", "drf-idempotency 1.0, Redis backend"),
    Contender("django-idempotency-key", "django-idempotency-key 1.3, Redis cache + lock"),
)


# --- The peers' virtualenv -------------------------------------------------------------


def ensure_venv() -> Path:
    """``.var/peers``: the app's locked dependencies plus the packages compared."""
    python = PEERS_VENV / "bin" / "python"
    check = [str(python), "-c", "import drf_idempotency, idempotency_key"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return PEERS_VENV / "bin"
    print("bench: creating .var/peers (the compared packages) ...", flush=True)
    subprocess.run(["python3", "-m", "venv", str(PEERS_VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    lock = str(ROOT / "requirements.lock")
    subprocess.run([*pip, "--require-hashes", "--no-deps", "-r", lock], check=True)
    subprocess.run([*pip, *PEER_PACKAGES], check=True)
    return PEERS_VENV / "bin"


def peer_env(ctx: BenchContext, contender: Contender) -> dict[str, str]:
    if contender.is_onceshop:
        return {}
    return {
        "DJANGO_SETTINGS_MODULE": "bench.peer_settings",
        "BENCH_PEER": contender.name,
        "IDEMPOTENCY_ENABLED": "false",
    }


def migrate_peer_tables(ctx: BenchContext, bin_dir: Path) -> None:
    """drf-idempotency's database backend has a table of its own."""
    env = appserver.app_env(
        database_url=ctx.database_url,
        redis_url=ctx.redis_url,
        overrides=peer_env(ctx, CONTENDERS[1]),
    )
    subprocess.run(
        [str(bin_dir / "python"), "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
    )


# --- Requests ----------------------------------------------------------------------------


def request(token: str, key: str, sku: str) -> HttpRequest:
    # No expected header: the packages mark replays their own way (or not at all).
    # Replays are checked in the database instead: they must make no order.
    order = order_request(token=token, key=key, sku=sku, replayed=False)
    return replace(order, expect_headers={})


def fresh(tokens: list[str], skus: list[str]) -> RequestFactory:
    return lambda client, _n: request(tokens[client], str(uuid.uuid4()), skus[client])


def send(port: int, r: HttpRequest) -> tuple[int, bytes]:
    conn = HTTPConnection(appserver.HOST, port, timeout=30)
    try:
        conn.request(r.method, r.path, body=r.body, headers=dict(r.headers))
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def precreate(tokens: list[str], port: int, skus: list[str]) -> list[list[str]]:
    """Keys whose order exists, per client, made one at a time (no lock contention)."""
    keys: list[list[str]] = [[] for _ in tokens]
    conn = HTTPConnection(appserver.HOST, port, timeout=30)
    try:
        for client, token in enumerate(tokens):
            for _ in range(REPLAY_KEYS_PER_CLIENT):
                key = str(uuid.uuid4())
                r = request(token, key, skus[client])
                conn.request(r.method, r.path, body=r.body, headers=dict(r.headers))
                answer = conn.getresponse()
                answer.read()
                if answer.status == 201:
                    keys[client].append(key)
    finally:
        conn.close()
    if not all(keys):
        raise RuntimeError("pre-creating replay keys: a client got no order")
    return keys


def replays(tokens: list[str], skus: list[str], keys: list[list[str]]) -> RequestFactory:
    return lambda client, n: request(
        tokens[client], keys[client][n % len(keys[client])], skus[client]
    )


def stranger_replays(port: int, tokens: list[str], key: str, sku: str) -> int:
    """Client 0's finished key and body, sent by client 1 and by nobody at all: how
    many of the two get client 0's stored answer (its order's number). Client 1
    getting an order of its own is right: keys are scoped per user."""
    number = Order.objects.get(idempotency_key=key, user__auth_token__key=tokens[0]).number
    stranger = request(tokens[1], key, sku)
    anonymous = replace(
        stranger, headers={k: v for k, v in stranger.headers.items() if k != "Authorization"}
    )
    return sum(1 for r in (stranger, anonymous) if number.encode() in send(port, r)[1])


# --- 100 identical requests at once --------------------------------------------------------


@dataclass(frozen=True)
class SameKey:
    orders: int  # orders made for the key
    let_through: int  # 409 idempotency-key-reused: reached the view, stopped by the index
    statuses: dict[str, int]


def same_key_at_once(token: str, port: int, sku: str) -> SameKey:
    """SAME_KEY_REQUESTS connections, opened first, then released together."""
    key = str(uuid.uuid4())
    r = request(token, key, sku)
    barrier = threading.Barrier(SAME_KEY_REQUESTS)
    answers: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def one() -> None:
        conn = HTTPConnection(appserver.HOST, port, timeout=SAME_KEY_TIMEOUT_S)
        try:
            conn.connect()
            barrier.wait()
            conn.request(r.method, r.path, body=r.body, headers=dict(r.headers))
            response = conn.getresponse()
            answer = (response.status, response.read())
        except OSError:
            answer = (0, b"")
        finally:
            conn.close()
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=one) for _ in range(SAME_KEY_REQUESTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return SameKey(
        orders=Order.objects.filter(idempotency_key=key).count(),
        let_through=sum(1 for _, body in answers if b"idempotency-key-reused" in body),
        statuses=dict(Counter(str(status) for status, _ in answers)),
    )


# --- The suite -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    contender: Contender
    first: Throughput
    replay: Throughput
    replay_orders: int  # orders made during the replay scenario: must be 0
    same_key: SameKey
    stranger_replays: int  # of 2: another user's, and no credentials


def measure_contender(
    ctx: BenchContext, contender: Contender, bin_dir: Path, skus: list[str], tokens: list[str]
) -> Result:
    env = appserver.app_env(
        database_url=ctx.database_url,
        redis_url=ctx.redis_url,
        overrides=peer_env(ctx, contender),
    )
    with appserver.gunicorn(
        name=f"peer-{contender.name}",
        env=env,
        log_dir=ctx.out_dir,
        bin_dir=None if contender.is_onceshop else str(bin_dir),
    ) as server:

        def run(kind: str, factory: RequestFactory) -> Throughput:
            return measure(
                name=f"peers_{contender.name}_{kind}",
                label=f"{contender.label}: {kind}",
                server=server,
                factory=factory,
                plan=ctx.drive,
                database_url=ctx.database_url,
            )

        first = run("first-time", fresh(tokens, skus))
        keys = precreate(tokens, server.port, skus)
        before = Order.objects.count()
        replay = run("replay", replays(tokens, skus, keys))
        replay_orders = Order.objects.count() - before
        same_key = same_key_at_once(tokens[0], server.port, skus[0])
        strangers = stranger_replays(server.port, tokens, keys[0][0], skus[0])
    return Result(contender, first, replay, replay_orders, same_key, strangers)


def run(ctx: BenchContext) -> SuiteResult:
    bin_dir = ensure_venv()
    migrate_peer_tables(ctx, bin_dir)
    skus = [f"{SKU_PREFIX}{i + 1}" for i in range(ctx.options.clients)]
    for sku in skus:
        seed_product(sku)
    # A user per client, each buying its own product: many customers, no shared row
    # or per-user lock (the open-orders cap) between two clients.
    tokens = [p.token for p in create_payers(prefix="bench-peer", count=ctx.options.clients)]
    results = [measure_contender(ctx, c, bin_dir, skus, tokens) for c in CONTENDERS]
    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        throughputs=[t for r in results for t in (r.first, r.replay)],
        metrics=metrics(results),
        sections=[comparison_section(results)],
    )


def metrics(results: list[Result]) -> list[Metric]:
    onceshop = results[0]
    out = []
    for r in results[1:]:
        out.append(
            Metric(
                f"peers_{r.contender.name}_first_vs_onceshop",
                f"{r.contender.label}: first-time req/s / OnceShop's",
                ratio(r.first.per_second, onceshop.first.per_second),
                "x",
            )
        )
        out.append(
            Metric(
                f"peers_{r.contender.name}_replay_vs_onceshop",
                f"{r.contender.label}: replay req/s / OnceShop's",
                ratio(r.replay.per_second, onceshop.replay.per_second),
                "x",
            )
        )
    return out


def comparison_section(results: list[Result]) -> Section:
    rows = [
        [
            r.contender.label,
            f"{r.first.per_second:,.1f}",
            f"{r.first.p95_ms:,.1f}",
            f"{r.first.non_2xx + r.first.errors:,}",
            f"{r.replay.per_second:,.1f}",
            f"{r.replay.p95_ms:,.1f}",
            f"{r.replay.non_2xx + r.replay.errors:,}",
            str(r.replay_orders),
            str(r.same_key.orders),
            str(r.same_key.let_through),
            ", ".join(f"{k}: {v}" for k, v in sorted(r.same_key.statuses.items())),
            f"{r.stranger_replays} of 2",
        ]
        for r in results
    ]
    headers = [
        "contender",
        "first-time req/s",
        "p95 ms",
        "non-2xx",
        "replay req/s",
        "p95 ms",
        "non-2xx",
        "orders made by replays",
        f"{SAME_KEY_REQUESTS} at once: orders",
        "let through to the view",
        "answers",
        "stored answer served to another user / no credentials",
    ]
    return Section("Side by side (same endpoint, database, gunicorn)", table(headers, rows))


SUITE = Suite(name="peers", title="The peers: idempotency packages, side by side", run=run)
