"""Provider notifications: what applying one costs, and what a duplicate costs.

Scenarios, each with 16 keep-alive clients against gunicorn:

* **fresh**: ``POST /api/v1/callbacks/sandbox/`` with a signed SUCCESS notification
  for a PENDING attempt (pre-created in-process, each taken once from one pool): the
  signature check, then one transaction with the notification row, the payment
  (SUCCEEDED), the ledger entry and the order (PAID), and the fulfilment task
  enqueued on commit;
* **duplicate**: the same notifications sent again, as a provider's redelivery:
  answered from the stored row after one indexed lookup, nothing written.

Then, in-process (``bench/callbacks_inprocess.py``): the SQL of a fresh
notification and of a duplicate, and where a fresh one spends its time.
"""

from __future__ import annotations

import secrets
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings

from bench import callbacks_inprocess
from bench.callbacks_inprocess import InProcess
from bench.context import BenchContext, Suite, SuiteResult
from bench.fixtures import Attempt, bench_queue, pending_attempts, rows_needed, seed_product
from bench.harness import HttpRequest, RequestFactory, measure
from bench.orders_inprocess import sql_section
from bench.stats import Metric, Target, Throughput, ratio
from callbacks.models import ProviderNotification
from payments.providers.sandbox import SIGNATURE_HEADER, sign
from sandbox.delivery import encode_body

PATH = "/api/v1/callbacks/sandbox/"
SKU = "CALLBACK-1"
# The attempts pre-created for the fresh scenario must outlast its warm-up and
# measurement. Sized for this rate (notifications/s over all clients), about 1.5x
# the most a busy 2-core machine reached (175/s); a pool that runs dry anyway is
# reported (`attempts left unused` is 0), never averaged in.
FRESH_RATE_BOUND_PER_S = 250.0
# In-process notifications timed (fresh ones each need their own attempt).
PHASE_ITERATIONS, QUICK_PHASE_ITERATIONS = 100, 10
# The Celery queue fulfilment tasks go to: no worker consumes it; deleted afterwards.
CALLBACK_QUEUE = "onceshop-bench-callbacks"
DUPLICATE_QUERY_TARGET = Target("<=", 1)  # one indexed lookup on notify_id


# --- Notifications --------------------------------------------------------------------


def signature_header(*, secret: str, timestamp: int, body: bytes) -> str:
    """``Sandbox-Signature``: ``t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>``."""
    return f"t={timestamp},v1={sign(secret=secret, timestamp=timestamp, raw_body=body)}"


def webhook_secret() -> str:
    """The secret the server verifies with (the first, if several are configured)."""
    return settings.SANDBOX_WEBHOOK_SECRET.split(",")[0].strip()


def signed_headers(body: bytes, *, secret: str) -> Mapping[str, str]:
    """The headers of a delivery of ``body``, signed now: the sandbox signs every
    delivery attempt afresh (and a ``t`` older than 300 s is refused)."""
    header = signature_header(secret=secret, timestamp=int(time.time()), body=body)
    return {"Content-Type": "application/json", SIGNATURE_HEADER: header}


def callback_request(body: bytes, *, secret: str) -> HttpRequest:
    return HttpRequest(
        method="POST", path=PATH, body=body, headers=signed_headers(body, secret=secret)
    )


@dataclass(frozen=True)
class Notice:
    """One notification: its id (what dedupe keys on) and its exact bytes."""

    notify_id: str
    body: bytes


def success_notice(attempt: Attempt, *, paid_at: datetime) -> Notice:
    """A SUCCESS notification for ``attempt``, byte for byte as the sandbox sends one.

    New ``notify_id`` and ``trade_no`` (the provider's references), shaped like the
    sandbox's; compact sorted JSON (``sandbox.delivery.encode_body``, what it signs).
    """
    notify_id = "N" + secrets.token_hex(12).upper()
    body = encode_body(
        {
            "notify_id": notify_id,
            "trade_no": "T" + secrets.token_hex(10).upper(),
            "out_trade_no": attempt.out_trade_no,
            "trade_status": "SUCCESS",
            "amount": attempt.amount,
            "currency": attempt.currency,
            "paid_at": paid_at.isoformat().replace("+00:00", "Z"),
        }
    )
    return Notice(notify_id=notify_id, body=body)


@dataclass
class CallbackPlan:
    """Notifications for the clients to take, and what each client sent.

    One shared pool, not a share per client: closed-loop clients do not progress
    evenly (the fastest of 16 can do half as much again as the mean), and any
    attempt is as good as another (no two touch the same rows). So the pool only
    has to cover the total rate, and only runs dry if the total outruns it.
    """

    pool: deque[Notice]
    secret: str
    clients: int
    size: int = field(init=False)  # of the pool as planned
    sent: list[list[Notice]] = field(init=False)

    def __post_init__(self) -> None:
        self.size = len(self.pool)
        self.sent = [[] for _ in range(self.clients)]


def fresh_notifications(plan: CallbackPlan) -> RequestFactory:
    """Each request the next unused notification of the pool; None once it is empty."""

    def factory(client: int, _n: int) -> HttpRequest | None:
        try:
            notice = plan.pool.popleft()  # atomic in CPython: no two clients get the same
        except IndexError:
            return None
        plan.sent[client].append(notice)
        return callback_request(notice.body, secret=plan.secret)

    return factory


def taken_notifications(plan: CallbackPlan) -> list[list[Notice]]:
    """Per client, the notifications the shop stored: re-sending them is a duplicate."""
    ids = [notice.notify_id for sent in plan.sent for notice in sent]
    stored = set(
        ProviderNotification.objects.filter(notify_id__in=ids).values_list("notify_id", flat=True)
    )
    return [[notice for notice in sent if notice.notify_id in stored] for sent in plan.sent]


def duplicate_notifications(plan: CallbackPlan) -> RequestFactory:
    """Client i re-sends the notifications of its that were stored, round and round."""
    taken = taken_notifications(plan)
    if not all(taken):
        raise RuntimeError("a client has no stored notification to duplicate")
    return lambda client, n: callback_request(
        taken[client][n % len(taken[client])].body, secret=plan.secret
    )


# --- The suite ----------------------------------------------------------------------


def plan_notifications(ctx: BenchContext, *, count: int) -> CallbackPlan:
    paid_at = datetime.now(UTC)
    notices = [
        success_notice(attempt, paid_at=paid_at)
        for attempt in pending_attempts(user_id=ctx.user_id, sku=SKU, count=count)
    ]
    return CallbackPlan(pool=deque(notices), secret=webhook_secret(), clients=ctx.options.clients)


@dataclass(frozen=True)
class Scenarios:
    fresh: Throughput
    duplicate: Throughput
    rows_written_by_duplicates: int


def http_scenarios(ctx: BenchContext, plan: CallbackPlan, queue: str) -> Scenarios:
    with ctx.server("callbacks", CELERY_QUEUE=queue) as server:
        fresh = measure(
            name="callback_fresh",
            label="callbacks: fresh notification (applied)",
            server=server,
            factory=fresh_notifications(plan),
            plan=ctx.drive,
            database_url=ctx.database_url,
        )
        factory = duplicate_notifications(plan)
        rows_before = ProviderNotification.objects.count()
        duplicate = measure(
            name="callback_duplicate",
            label="callbacks: duplicate (same notify_id again)",
            server=server,
            factory=factory,
            plan=ctx.drive,
            database_url=ctx.database_url,
        )
        written = ProviderNotification.objects.count() - rows_before
    return Scenarios(fresh=fresh, duplicate=duplicate, rows_written_by_duplicates=written)


def run(ctx: BenchContext) -> SuiteResult:
    seed_product(SKU)
    # One pool for all clients (see CallbackPlan): sized for the total rate.
    total = rows_needed(
        rate_bound=FRESH_RATE_BOUND_PER_S, seconds=ctx.options.warmup_s + ctx.options.measure_s
    )
    plan = plan_notifications(ctx, count=total)
    iterations = QUICK_PHASE_ITERATIONS if ctx.options.quick else PHASE_ITERATIONS
    # A warm-up, the counted one (and its duplicate), then the timed ones.
    paid_at = datetime.now(UTC)
    local_bodies = [
        success_notice(attempt, paid_at=paid_at).body
        for attempt in pending_attempts(user_id=ctx.user_id, sku=SKU, count=iterations + 2)
    ]
    with bench_queue(name=CALLBACK_QUEUE, redis_url=ctx.redis_url) as queue:
        scenarios = http_scenarios(ctx, plan, queue)
        local = callbacks_inprocess.in_process(
            local_bodies,
            path=PATH,
            signed=lambda body: signed_headers(body, secret=plan.secret),
        )
    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        throughputs=[scenarios.fresh, scenarios.duplicate],
        metrics=[
            Metric(
                "duplicate_vs_fresh",
                "duplicate / fresh req/s",
                ratio(scenarios.duplicate.per_second, scenarios.fresh.per_second),
                "x",
            ),
            *inprocess_metrics(local),
            *check_metrics(plan, scenarios),
        ],
        sections=[
            callbacks_inprocess.phases_section(local.fresh),
            sql_section("SQL of one fresh notification", local.fresh_sql),
            sql_section("SQL of one duplicate", local.duplicate_sql),
        ],
    )


# --- Figures --------------------------------------------------------------------------


def inprocess_metrics(local: InProcess) -> list[Metric]:
    return [
        Metric(
            "queries_callback_fresh", "SQL statements, fresh notification", local.fresh_sql.total
        ),
        Metric(
            "queries_callback_duplicate",
            "SQL statements, duplicate",
            local.duplicate_sql.total,
            target=DUPLICATE_QUERY_TARGET,
            note="the notify_id lookup",
        ),
        Metric(
            "ms_callback_fresh",
            "ms per fresh notification (1 thread)",
            local.fresh.ms_per_request,
            "ms",
        ),
        Metric("ms_callback_duplicate", "ms per duplicate (1 thread)", local.duplicate_ms, "ms"),
    ]


def not_applied() -> int:
    """Stored notifications that did not settle their attempt: 0 in a sound run."""
    return ProviderNotification.objects.exclude(
        outcome=ProviderNotification.Outcome.APPLIED
    ).count()


def check_metrics(plan: CallbackPlan, scenarios: Scenarios) -> list[Metric]:
    """What makes the figures trustworthy: nobody starved, every fresh one applied once."""
    return [
        Metric(
            "callback_attempts_left",
            "pre-created attempts left unused",
            len(plan.pool),
            target=Target(">=", 1),
            note=f"of {plan.size}; 0: the pool ran dry before the window ended",
        ),
        Metric(
            "callback_not_applied",
            "notifications stored but not applied",
            not_applied(),
            target=Target("<=", 0),
        ),
        Metric(
            "callback_rows_by_duplicates",
            "notification rows written by duplicates",
            scenarios.rows_written_by_duplicates,
            target=Target("<=", 0),
        ),
    ]


SUITE = Suite(
    name="callbacks", title="Provider callbacks (POST /api/v1/callbacks/sandbox/)", run=run
)
