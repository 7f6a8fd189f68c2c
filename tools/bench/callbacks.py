"""Provider notifications: what applying one costs, and what a duplicate costs.

16 clients send signed SUCCESS notifications for pre-created PENDING attempts
(each taken once from one pool), then the same again, as the provider's
redelivery: a duplicate must cost one indexed lookup and write nothing. Then
in-process: the SQL of each, and where a fresh one spends its time.
"""

from __future__ import annotations

import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

from celery.app.task import Task
from django.conf import settings
from django.test import Client

from callbacks import api, services
from callbacks.models import ProviderNotification
from demo.sandbox.delivery import encode_body
from payments.providers.sandbox import SIGNATURE_HEADER, SandboxProvider, sign
from tools.bench import inprocess
from tools.bench.context import BenchContext, Suite, SuiteResult
from tools.bench.fixtures import Attempt, bench_queue, pending_attempts, rows_needed, seed_product
from tools.bench.harness import HttpRequest, RequestFactory
from tools.bench.stats import Figure, Target, figures, ratio

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
FIGURES: tuple[Figure, ...] = (
    ("duplicate_vs_fresh", "duplicate / fresh req/s", "x", None),
    ("queries_callback_fresh", "SQL statements, fresh notification", "", None),
    ("queries_callback_duplicate", "SQL statements, duplicate", "", Target("<=", 1)),
    ("ms_callback_fresh", "ms per fresh notification (1 thread)", "ms", None),
    ("ms_callback_duplicate", "ms per duplicate (1 thread)", "ms", None),
    # What makes the figures trustworthy: nobody starved, every fresh one applied once.
    ("callback_attempts_left", "pre-created attempts left unused", "", Target(">=", 1)),
    ("callback_not_applied", "notifications stored but not applied", "", Target("<=", 0)),
    ("callback_rows_by_duplicates", "notification rows written by duplicates", "", Target("<=", 0)),
)

VERIFY = "signature check and parse (verify_notification)"
INGEST = "ingest: notify_id lookup, then one transaction up to COMMIT"
SETTLE = "settle: payment SUCCEEDED, ledger entry, order PAID (payment_settle)"
ENQUEUE = "fulfilment task enqueued on commit (Celery LPUSH to Redis)"


def signed_headers(body: bytes, *, secret: str) -> dict[str, str]:
    """The headers of a delivery of ``body``, signed now: the sandbox signs every
    delivery attempt afresh (and a ``t`` older than 300 s is refused)."""
    now = int(time.time())
    signature = f"t={now},v1={sign(secret=secret, timestamp=now, raw_body=body)}"
    return {"Content-Type": "application/json", SIGNATURE_HEADER: signature}


@dataclass(frozen=True)
class Notice:
    """One notification: its id (what dedupe keys on) and its exact bytes."""

    notify_id: str
    body: bytes


def success_notice(attempt: Attempt, *, paid_at: datetime) -> Notice:
    """A SUCCESS notification for ``attempt``, byte for byte as the sandbox sends one:
    new provider references shaped like its own, compact sorted JSON (what it signs)."""
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


def success_notices(ctx: BenchContext, count: int) -> list[Notice]:
    paid_at = datetime.now(UTC)
    attempts = pending_attempts(user_id=ctx.user_id, sku=SKU, count=count)
    return [success_notice(attempt, paid_at=paid_at) for attempt in attempts]


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

    def request(self, notice: Notice) -> HttpRequest:
        return HttpRequest(
            "POST", PATH, notice.body, signed_headers(notice.body, secret=self.secret)
        )


def fresh_notifications(plan: CallbackPlan) -> RequestFactory:
    """Each request the next unused notification of the pool; None once it is empty."""

    def factory(client: int, _n: int) -> HttpRequest | None:
        try:
            notice = plan.pool.popleft()  # atomic in CPython: no two clients get the same
        except IndexError:
            return None
        plan.sent[client].append(notice)
        return plan.request(notice)

    return factory


def duplicate_notifications(plan: CallbackPlan) -> RequestFactory:
    """Client i re-sends those of its notifications the shop stored, round and round."""
    ids = [notice.notify_id for sent in plan.sent for notice in sent]
    stored = set(
        ProviderNotification.objects.filter(notify_id__in=ids).values_list("notify_id", flat=True)
    )
    taken = [[notice for notice in sent if notice.notify_id in stored] for sent in plan.sent]
    if not all(taken):
        raise RuntimeError("a client has no stored notification to duplicate")
    return lambda client, n: plan.request(taken[client][n % len(taken[client])])


def run(ctx: BenchContext) -> SuiteResult:
    seed_product(SKU)
    # One pool for all clients (see CallbackPlan): sized for the total rate.
    seconds = ctx.options.warmup_s + ctx.options.measure_s
    pool = deque(
        success_notices(ctx, rows_needed(rate_bound=FRESH_RATE_BOUND_PER_S, seconds=seconds))
    )
    secret = settings.SANDBOX_WEBHOOK_SECRET.split(",")[0].strip()  # what the server checks first
    plan = CallbackPlan(pool=pool, secret=secret, clients=ctx.options.clients)
    iterations = QUICK_PHASE_ITERATIONS if ctx.options.quick else PHASE_ITERATIONS
    # In-process: a warm-up, the counted one (then re-sent as the counted duplicate),
    # then the timed ones.
    local = iter(success_notices(ctx, iterations + 2))
    with bench_queue(name=CALLBACK_QUEUE, redis_url=ctx.redis_url) as queue:
        with ctx.server("callbacks", CELERY_QUEUE=queue) as server:
            label = "callbacks: fresh notification (applied)"
            fresh = ctx.measure(server, "callback_fresh", label, fresh_notifications(plan))
            duplicates = duplicate_notifications(plan)
            rows_before = ProviderNotification.objects.count()
            label = "callbacks: duplicate (same notify_id again)"
            duplicate = ctx.measure(server, "callback_duplicate", label, duplicates)
            written_by_duplicates = ProviderNotification.objects.count() - rows_before
        client = Client()

        def notify(notice: Notice) -> None:
            headers = signed_headers(notice.body, secret=secret)
            inprocess.post(client, PATH, notice.body, headers, 200)

        notify(next(local))  # connection open, caches filled
        counted = next(local)
        fresh_sql = inprocess.count_queries(lambda: notify(counted))
        duplicate_sql = inprocess.count_queries(lambda: notify(counted))
        probes = [
            inprocess.Probe(SandboxProvider, "verify_notification", VERIFY),
            inprocess.Probe(api, "callback_ingest", INGEST),
            inprocess.Probe(services, "payment_settle", SETTLE),
            inprocess.Probe(Task, "apply_async", ENQUEUE),  # here, only fulfil_order's
        ]
        timed = inprocess.time_phases(lambda: notify(next(local)), iterations, probes)
        duplicate_ms = inprocess.ms_per_call(lambda: notify(counted), iterations)
    not_applied = ProviderNotification.objects.exclude(outcome=ProviderNotification.Outcome.APPLIED)
    values = {
        "duplicate_vs_fresh": ratio(duplicate.per_second, fresh.per_second),
        "queries_callback_fresh": fresh_sql.total,
        "queries_callback_duplicate": duplicate_sql.total,  # one indexed lookup on notify_id
        "ms_callback_fresh": timed.ms_per_request,
        "ms_callback_duplicate": duplicate_ms,
        "callback_attempts_left": len(plan.pool),
        "callback_not_applied": not_applied.count(),
        "callback_rows_by_duplicates": written_by_duplicates,
    }
    notes = {
        "queries_callback_duplicate": "the notify_id lookup",
        "callback_attempts_left": f"of {plan.size}; 0: the pool ran dry before the window ended",
    }
    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        throughputs=[fresh, duplicate],
        metrics=figures(FIGURES, values, notes),
        sections=[
            inprocess.phase_section(
                f"Where a fresh notification spends its time ({iterations}, in-process)",
                "One notification at a time through Django's test client in the bench process. "
                "Wall time inside the view's functions, wrapped in the bench process (the app is "
                "unchanged); rows marked `-` lie inside the ingest above them.",
                timed,
                phases=[VERIFY, INGEST],
                nested=[SETTLE, ENQUEUE],
                rest="rest (Django and DRF request handling, rendering)",
            ),
            inprocess.sql_section("SQL of one fresh notification", fresh_sql),
            inprocess.sql_section("SQL of one duplicate", duplicate_sql),
        ],
    )


SUITE = Suite(
    name="callbacks", title="Provider callbacks (POST /api/v1/callbacks/sandbox/)", run=run
)
