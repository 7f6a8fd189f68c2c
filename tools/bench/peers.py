"""The peers: OnceShop's key layer against the packages a Django developer finds first.

The same order endpoint, database, Redis and gunicorn; only what answers a retry
changes: OnceShop's layer, or, with it off, a package's middleware in front of the
view (``tools/bench/peer_settings.py``; the packages live in ``.var/peers``, never in the
app). Per contender: first-time creation and replay (16 clients), 100 identical
requests released together, counted in the database (with the layer off,
OnceShop's unique (user, key) index on orders stops what a package lets through,
with 409 ``idempotency-key-reused``), and a finished key sent by someone else.
"""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections import Counter
from dataclasses import replace
from http.client import HTTPConnection
from pathlib import Path

from orders.models import Order
from tools.bench import ROOT
from tools.bench.appserver import HOST, app_env, gunicorn
from tools.bench.context import BenchContext, Section, Suite, SuiteResult
from tools.bench.fixtures import create_payers, seed_product
from tools.bench.harness import HttpRequest, send
from tools.bench.markdown import table
from tools.bench.orders import order_request
from tools.bench.stats import Metric, Throughput, cpu_ms_per_request, ratio

PEERS_VENV = ROOT / ".var" / "peers"
# Exact versions: the comparison is of these releases.
PEER_PACKAGES = ("drf-idempotency==1.0.0", "django-idempotency-key==1.3.0")
SKU_PREFIX = "PEER-"
REPLAY_KEYS_PER_CLIENT = 8
SAME_KEY_REQUESTS = 100
SAME_KEY_TIMEOUT_S = 60.0
# (BENCH_PEER, label). The first is OnceShop's own layer; the others run in the peers'
# virtualenv with it off. django-idempotency-key's memory store and thread lock are
# per process: with gunicorn's 2 workers they would not see each other's keys.
CONTENDERS = (
    ("onceshop", "OnceShop (its own layer)"),
    ("drf-idempotency-db", "drf-idempotency 1.0, database backend"),
    ("drf-idempotency-redis", "drf-idempotency 1.0, Redis backend"),
    ("django-idempotency-key", "django-idempotency-key 1.3, Redis cache + lock"),
)
COLUMNS = ["contender", "first-time req/s", "p95 ms", "non-2xx", "replay req/s", "p95 ms"]
COLUMNS += ["non-2xx", "CPU ms per first-time (server + PG)", "CPU ms per replay (server + PG)"]
COLUMNS += ["orders made by replays", f"{SAME_KEY_REQUESTS} at once: orders"]
COLUMNS += ["let through to the view", "answers"]
COLUMNS += ["stored answer served to another user / no credentials"]


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


def peer_env(ctx: BenchContext, peer: str) -> dict[str, str]:
    """A server's environment: for a package, its settings and OnceShop's layer off."""
    package = {
        "DJANGO_SETTINGS_MODULE": "tools.bench.peer_settings",
        "BENCH_PEER": peer,
        "IDEMPOTENCY_ENABLED": "false",
    }
    overrides = {} if peer == "onceshop" else package
    return app_env(database_url=ctx.database_url, redis_url=ctx.redis_url, overrides=overrides)


def request(token: str, key: str, sku: str) -> HttpRequest:
    # No expected header: the packages mark replays their own way (or not at all).
    # Replays are checked in the database instead: they must make no order.
    return replace(order_request(token=token, key=key, sku=sku, replayed=False), expect_headers={})


def same_key_at_once(token: str, port: int, sku: str) -> tuple[int, int, str]:
    """SAME_KEY_REQUESTS connections, opened first, then released together with one
    key and body: orders made, requests let through to the view, the answers."""
    key = str(uuid.uuid4())
    r, barrier, answers = request(token, key, sku), threading.Barrier(SAME_KEY_REQUESTS), []

    def one() -> None:
        conn = HTTPConnection(HOST, port, timeout=SAME_KEY_TIMEOUT_S)
        try:
            conn.connect()
            barrier.wait()
            conn.request(r.method, r.path, body=r.body, headers=dict(r.headers))
            response = conn.getresponse()
            answers.append((response.status, response.read()))  # list.append: thread-safe
        except OSError:
            answers.append((0, b""))
        finally:
            conn.close()

    threads = [threading.Thread(target=one) for _ in range(SAME_KEY_REQUESTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = Counter(str(status) for status, _ in answers)
    return (
        Order.objects.filter(idempotency_key=key).count(),
        sum(1 for _, body in answers if b"idempotency-key-reused" in body),
        ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())),
    )


def contender(
    ctx: BenchContext, peer: str, label: str, bin_dir: Path, skus: list[str], tokens: list[str]
) -> tuple[Throughput, Throughput, list[str]]:
    """First-time and replay figures, and the contender's row of the comparison."""
    bin_dir_or_none = None if peer == "onceshop" else str(bin_dir)
    env = peer_env(ctx, peer)
    with gunicorn(
        name=f"peer-{peer}", env=env, log_dir=ctx.out_dir, bin_dir=bin_dir_or_none
    ) as server:
        name, fresh = f"peers_{peer}_first-time", f"{label}: first-time"
        first = ctx.measure(
            server, name, fresh, lambda c, _n: request(tokens[c], str(uuid.uuid4()), skus[c])
        )
        # Keys whose order exists, per client, made one at a time (no lock contention).
        keys = [[str(uuid.uuid4()) for _ in range(REPLAY_KEYS_PER_CLIENT)] for _ in tokens]
        for own, token, sku in zip(keys, tokens, skus, strict=True):
            own[:] = [k for k in own if send(server.port, request(token, k, sku))[0] == 201]
        if not all(keys):
            raise RuntimeError("pre-creating replay keys: a client got no order")
        before = Order.objects.count()
        replay = ctx.measure(
            server,
            f"peers_{peer}_replay",
            f"{label}: replay",
            lambda c, n: request(tokens[c], keys[c][n % len(keys[c])], skus[c]),
        )
        replay_orders = Order.objects.count() - before
        orders, let_through, answers = same_key_at_once(tokens[0], server.port, skus[0])
        # Client 0's finished key and body, sent by client 1 and by nobody at all: how
        # many of the two get client 0's stored answer (its order's number). Client 1
        # getting an order of its own is right: keys are scoped per user.
        number = Order.objects.get(idempotency_key=keys[0][0], user__auth_token__key=tokens[0])
        stranger = request(tokens[1], keys[0][0], skus[0])
        headers = {k: v for k, v in stranger.headers.items() if k != "Authorization"}
        anonymous = replace(stranger, headers=headers)
        served = sum(
            number.number.encode() in send(server.port, r)[1] for r in (stranger, anonymous)
        )
    row = [label]
    for t in (first, replay):
        row += [f"{t.per_second:,.1f}", f"{t.p95_ms:,.1f}", f"{t.non_2xx + t.errors:,}"]
    row += [_cpu(first), _cpu(replay)]
    row += [str(replay_orders), str(orders), str(let_through), answers, f"{served} of 2"]
    return first, replay, row


def _cpu(t: Throughput) -> str:
    """CPU per request, the gunicorn's and the database's: "1.23 (0.98 + 0.25)"."""
    total, server = cpu_ms_per_request(t), cpu_ms_per_request(t, with_database=False)
    return f"{total:.2f} ({server:.2f} + {total - server:.2f})"


def run(ctx: BenchContext) -> SuiteResult:
    bin_dir = ensure_venv()
    # drf-idempotency's database backend has a table of its own.
    migrate = [str(bin_dir / "python"), "manage.py", "migrate", "--no-input", "-v", "0"]
    subprocess.run(migrate, cwd=ROOT, env=peer_env(ctx, "drf-idempotency-db"), check=True)
    skus = [seed_product(f"{SKU_PREFIX}{i + 1}").sku for i in range(ctx.options.clients)]
    # A user per client, each buying its own product: many customers, no shared row
    # or per-user lock (the open-orders cap) between two clients.
    tokens = [p.token for p in create_payers(prefix="bench-peer", count=ctx.options.clients)]
    results = [contender(ctx, peer, label, bin_dir, skus, tokens) for peer, label in CONTENDERS]
    (ours_first, ours_replay, _), metrics = results[0], []
    for (peer, label), (first, replay, _) in zip(CONTENDERS[1:], results[1:], strict=True):
        for kind, words, ours, theirs in (
            ("first", "first-time", ours_first, first),
            ("replay", "replay", ours_replay, replay),
        ):
            speed = ratio(theirs.per_second, ours.per_second)
            name = f"peers_{peer}_{kind}_vs_onceshop"
            metrics.append(Metric(name, f"{label}: {words} req/s / OnceShop's", speed, "x"))
            cpu = ratio(cpu_ms_per_request(ours), cpu_ms_per_request(theirs))
            name, words = f"peers_{peer}_{kind}_cpu_vs_onceshop", f"{words} CPU per request"
            metrics.append(Metric(name, f"OnceShop's {words} / {label}'s", cpu, "x"))
    table_ = table(COLUMNS, [row for _, _, row in results])
    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        throughputs=[t for first, replay, _ in results for t in (first, replay)],
        metrics=metrics,
        sections=[Section("Side by side (same endpoint, database, gunicorn)", table_)],
    )


SUITE = Suite(name="peers", title="The peers: idempotency packages, side by side", run=run)
