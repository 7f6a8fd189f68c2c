"""One reconciler pass over many unknown payment attempts, against the sandbox over HTTP.

What a provider outage leaves behind: N attempts UNKNOWN, each with its
request stuck at ``payment_created``; the provider charged half of them before
it went quiet and never saw the other half. One ``reconcile`` pass then asks
the provider about each (gunicorn serving the sandbox, as deployed), rolls the
charged ones forward (PAID, ledger entry), fences and fails the others, and
finishes every request with its final answer.

Figures, in one run:

* the **provider's ceiling**: its gunicorn alone answering the reconciler's
  question to 16 keep-alive clients (queries/s);
* **attempts/s** of a whole pass (claim, 1-2 provider calls, settle, finish)
  over N attempts one question at a time, over N with RECONCILE_CONCURRENCY
  at once (its share of the ceiling: target >= 0.5), and over 5 x N;
* **SQL statements per attempt** of the passes over N and 5 x N: the same at
  both sizes (a batch costs a fixed number of statements, whatever its size).

The provider is a third party on machines of its own; here it shares the bench
machine. With two CPUs or more, its gunicorn runs on one CPU of its own and the
reconciler (and the ceiling's clients) on the others, for the ceiling and the
passes alike, so the pass never takes the provider's CPU to ask it questions.
PostgreSQL is not pinned. On one CPU everything shares it, and the report says so.

Runs as a registered suite (``SUITE``; add its module to ``select`` in
``tools/bench/__main__.py``) or alone:

    python -m tools.bench.reconcile_pass              # 10,000 and 50,000 attempts
    python -m tools.bench.reconcile_pass --quick      # 1,000 and 5,000
    python -m tools.bench.reconcile_pass --size 2000  # 2,000 and 10,000

Alone, it uses its own database (``<DATABASE_URL's name>_bench_reconcile``), so
it never disturbs a ``make bench`` (or another checkout's run) at the same time.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tools.bench.appserver import Server, tree_cpu_seconds
from tools.bench.context import BenchContext, Section, Suite, SuiteResult
from tools.bench.harness import HttpRequest, measure
from tools.bench.markdown import table
from tools.bench.standalone import standalone
from tools.bench.stats import Metric, Target, Throughput, ratio

if TYPE_CHECKING:  # Django models and the provider import only after django.setup()
    from payments.providers import PaymentProvider

ATTEMPTS, QUICK_ATTEMPTS = 10_000, 1_000
# The second, larger pass: statements per attempt must be the same at both sizes.
LARGE_FACTOR = 5
# The pass stops taking work after this long (its own budget): a bounded run
# on a slow, shared machine reports what it did in the time instead of hanging.
PASS_LIMIT_S, QUICK_PASS_LIMIT_S = 600.0, 120.0
AMOUNT = 1999
# Enqueued fulfil tasks go to a queue of their own, emptied afterwards: no worker
# of the demo or the tests must see the bench's orders.
BENCH_QUEUE = "onceshop-bench-reconcile"
STANDALONE_SUFFIX = "_bench_reconcile"

# The difference between the two sizes: the empty claim that ends a pass, spread
# over its attempts, is all that may differ.
PER_ATTEMPT_TARGET = Target("<=", 0.01)
CEILING_TARGET = Target(">=", 0.5)  # attempts/s over the provider's own queries/s


# --- Seeding --------------------------------------------------------------------------------------


def seed_unknown_attempts(*, user_id: int, count: int, tag: str) -> list[int]:
    """``count`` UNPAID orders whose attempt is UNKNOWN, each with its request at
    ``payment_created``; the provider holds a SUCCESS charge for every other one.

    Written in bulk, straight into both sides' tables: the bench measures the
    reconciler, not how the mess was made.
    """
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from demo.sandbox.models import Charge, Wallet
    from idempotency.models import IdempotencyKey
    from orders.models import Order
    from payments.flows import PayPoint
    from payments.models import Payment, PaymentStatus

    payer = get_user_model().objects.get(pk=user_id).get_username()
    orders = Order.objects.bulk_create(
        Order(number=f"B{tag}-{i:06d}", user_id=user_id, amount=AMOUNT, currency="CNY")
        for i in range(count)
    )
    payments = Payment.objects.bulk_create(
        Payment(
            order=order,
            out_trade_no=f"PB{tag}{i:06d}",
            status=PaymentStatus.UNKNOWN,
            amount=AMOUNT,
            currency="CNY",
            payer=payer,
        )
        for i, order in enumerate(orders)
    )
    now = timezone.now()
    IdempotencyKey.objects.bulk_create(
        IdempotencyKey(
            user_id=user_id,
            key=str(uuid.uuid4()),
            fingerprint="0" * 64,
            method="POST",
            path=f"/api/v1/orders/{payment.order.number}/pay/",
            recovery_point=PayPoint.PAYMENT_CREATED,
            resource_type="payment",
            resource_id=payment.pk,
            created_at=now,
        )
        for payment in payments
    )
    charged = payments[::2]
    Wallet.objects.bulk_create(
        [Wallet(payer=payer, balance=settings.SANDBOX_WALLET_START)], ignore_conflicts=True
    )
    wallet = Wallet.objects.get(payer=payer)
    Charge.objects.bulk_create(
        Charge(
            trade_no="T" + secrets.token_hex(10).upper(),
            out_trade_no=payment.out_trade_no,
            status=Charge.Status.SUCCESS,
            wallet=wallet,
            amount=AMOUNT,
            currency="CNY",
            notify_url="http://127.0.0.1:9/",
            paid_at=now,
        )
        for payment in charged
    )
    return [payment.pk for payment in payments]


# --- Running the pass -----------------------------------------------------------------------------


@contextmanager
def reconciler_settings(redis_url: str) -> Iterator[None]:
    """Attempts are due at once; fulfil messages go to the bench's own queue."""
    import redis
    from django.conf import settings

    from config.celery import app

    saved = settings.RECONCILE_AFTER_S, app.conf.task_default_queue
    settings.RECONCILE_AFTER_S = 0
    app.conf.task_default_queue = BENCH_QUEUE
    try:
        yield
    finally:
        settings.RECONCILE_AFTER_S, app.conf.task_default_queue = saved
        redis.Redis.from_url(redis_url).delete(BENCH_QUEUE)


def sandbox_provider(port: int) -> PaymentProvider:
    from django.conf import settings

    from payments.providers.sandbox import SandboxProvider

    return SandboxProvider(
        base_url=f"http://127.0.0.1:{port}/sandbox",
        api_key=settings.PROVIDER_API_KEY,
        timeout_s=settings.PROVIDER_TIMEOUT_S,
        webhook_secrets=[],
    )


@dataclass(frozen=True)
class TimedPass:
    attempts: int
    seconds: float
    counts: dict[str, int]
    concurrency: int
    statements: int  # every statement the pass sent, BEGIN and COMMIT included
    reconciler_cpu: float  # seconds of CPU: this process (every thread), and ...
    provider_cpu: float  # ... the sandbox's gunicorn (its master and workers)

    @property
    def per_attempt(self) -> float:
        return self.statements / max(self.attempts, 1)


@contextmanager
def statements_counted() -> Iterator[Callable[[], int]]:
    """Count every statement this thread's connection sends, as ``CaptureQueriesContext``
    does (BEGIN and COMMIT included), but without its 9,000-entry cap: a pass over
    50,000 attempts sends more than that."""
    from collections import deque

    from django.db import connection

    saved = connection.queries_log, connection.force_debug_cursor
    connection.queries_log = deque()
    connection.force_debug_cursor = True
    try:
        yield lambda: len(connection.queries_log)
    finally:
        connection.queries_log, connection.force_debug_cursor = saved


def provider_ceiling(ctx: BenchContext, server: Server, refs: list[str]) -> Throughput:
    """The sandbox alone answering ``GET /sandbox/v1/charges/{ref}`` to 16 keep-alive
    clients: the most queries/s the provider gives on this machine, the pass's ceiling."""
    from django.conf import settings

    headers = {"Authorization": f"Bearer {settings.PROVIDER_API_KEY}"}

    def factory(client: int, n: int) -> HttpRequest:
        ref = refs[(client * 7919 + n) % len(refs)]
        return HttpRequest("GET", f"/sandbox/v1/charges/{ref}", headers=headers)

    return measure(
        name="provider_query_ceiling",
        label="provider alone: GET /sandbox/v1/charges/{ref}",
        server=server,
        factory=factory,
        plan=ctx.drive,
        database_url=ctx.database_url,
    )


def timed_pass(
    *, provider: PaymentProvider, server: Server, attempts: int, limit_s: float, concurrency: int
) -> TimedPass:
    """One pass over the seeded attempts, timed, its statements and CPU counted."""
    import dataclasses

    from fastpaths.reconcile import reconcile_due_batched

    with statements_counted() as sent:
        cpu = time.process_time(), tree_cpu_seconds(server.pid)
        started = time.perf_counter()
        counts = reconcile_due_batched(provider=provider, budget_s=limit_s, concurrency=concurrency)
        seconds = time.perf_counter() - started
        statements = sent()
        reconciler_cpu = time.process_time() - cpu[0]
        provider_cpu = tree_cpu_seconds(server.pid) - cpu[1]
    return TimedPass(
        attempts,
        seconds,
        dataclasses.asdict(counts),
        concurrency,
        statements,
        reconciler_cpu,
        provider_cpu,
    )


def run(ctx: BenchContext) -> SuiteResult:
    attempts = QUICK_ATTEMPTS if ctx.options.quick else ATTEMPTS
    limit_s = QUICK_PASS_LIMIT_S if ctx.options.quick else PASS_LIMIT_S
    return run_sized(ctx, attempts=attempts, limit_s=limit_s)


def run_sized(ctx: BenchContext, *, attempts: int, limit_s: float) -> SuiteResult:
    from django.conf import settings

    from payments.models import Payment
    from reconcile.recovery import unsettled_payments

    concurrency = settings.RECONCILE_CONCURRENCY
    provider_cpus, own_cpus = split_cpus()
    with (
        ctx.server("reconcile-sandbox", cpus=provider_cpus) as server,
        reconciler_settings(ctx.redis_url),
        on_cpus(own_cpus),
    ):
        provider = sandbox_provider(server.port)
        # Earlier suites share the bench database and may leave attempts unsettled
        # (the callback suite pre-creates more than it uses): settle them first, so
        # each pass sees exactly its own attempts.
        unsettled_payments.run_once(provider=provider)
        # One question at a time, for the share concurrency adds; then the same size
        # with RECONCILE_CONCURRENCY at once, right after the provider's ceiling;
        # then LARGE_FACTOR times as many, for statements per attempt at two sizes.
        runs = [("S", attempts, 1), ("T", attempts, concurrency)]
        runs.append(("L", attempts * LARGE_FACTOR, concurrency))
        timed = []
        for tag, size, at_once in runs:
            ids = seed_unknown_attempts(user_id=ctx.user_id, count=size, tag=tag)
            if tag == "T":
                refs = list(
                    Payment.objects.filter(pk__in=ids[::2]).values_list("out_trade_no", flat=True)
                )
                ceiling = provider_ceiling(ctx, server, refs)
            timed.append(
                timed_pass(
                    provider=provider,
                    server=server,
                    attempts=size,
                    limit_s=limit_s,
                    concurrency=at_once,
                )
            )
    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        throughputs=[ceiling],
        metrics=metrics(timed, ceiling),
        sections=[
            topology_section(provider_cpus, own_cpus),
            statements_section(timed),
            *(outcome_section(t) for t in timed),
        ],
    )


def split_cpus() -> tuple[frozenset[int] | None, frozenset[int] | None]:
    """The provider's CPU and the reconciler's, as deployed (apart); None, None on one CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return frozenset(cpus[-1:]), frozenset(cpus[:-1])


@contextmanager
def on_cpus(cpus: frozenset[int] | None) -> Iterator[None]:
    """This process (the reconciler's pass, its asking threads) on ``cpus`` until the end."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def topology_section(provider: frozenset[int] | None, own: frozenset[int] | None) -> Section:
    if provider is None or own is None:
        where = "one CPU: the provider, the reconciler and PostgreSQL share it"
    else:
        where = (
            f"the provider's gunicorn on CPU {sorted(provider)}, the reconciler and the "
            f"ceiling's clients on CPU {sorted(own)}, PostgreSQL on any"
        )
    return Section("Where each side ran", where + ".")


# --- Figures --------------------------------------------------------------------------------------


def _settled(timed: TimedPass) -> int:
    return sum(timed.counts[k] for k in ("rolled_forward", "rolled_back", "already_settled"))


def metrics(timed: list[TimedPass], ceiling: Throughput) -> list[Metric]:
    serial, concurrent, large = timed
    rates = [_settled(t) / t.seconds for t in timed]
    return [
        Metric(
            "provider_query_ceiling",
            "provider ceiling: queries/s, 16 keep-alive clients",
            ceiling.per_second,
            note="the sandbox's gunicorn alone, same run",
        ),
        *(
            Metric(
                f"reconcile_attempts_per_s_{t.attempts}_c{t.concurrency}",
                f"attempts/s, one pass over {t.attempts:,}, {t.concurrency} question(s) at once",
                rate,
                note=f"{_settled(t):,} settled in {t.seconds:.1f} s",
            )
            for t, rate in zip(timed, rates, strict=True)
        ),
        *(
            Metric(
                f"reconcile_vs_ceiling_{t.attempts}",
                f"attempts/s over {t.attempts:,} ({t.concurrency} at once) / provider ceiling",
                ratio(rate, ceiling.per_second),
                "x",
                CEILING_TARGET,
                "an attempt costs 1.5 provider calls on average (half need the fence)",
            )
            for t, rate in ((concurrent, rates[1]), (large, rates[2]))
        ),
        Metric(
            "reconcile_concurrent_vs_serial",
            "attempts/s, concurrent / one at a time",
            ratio(rates[1], rates[0]),
            "x",
        ),
        *(
            Metric(
                f"reconcile_queries_per_attempt_{t.attempts}",
                f"SQL statements per attempt, pass over {t.attempts:,}",
                t.per_attempt,
                "fine",
                note=f"{t.statements:,} in all",
            )
            for t in (concurrent, large)
        ),
        Metric(
            "reconcile_queries_per_attempt_difference",
            f"statements per attempt, {large.attempts:,} - {concurrent.attempts:,} attempts",
            abs(large.per_attempt - concurrent.per_attempt),
            "fine",
            target=PER_ATTEMPT_TARGET,
            note="~0: the cost of an attempt does not grow with the pass",
        ),
        Metric(
            "reconcile_ms_per_attempt",
            "ms per attempt, serial pass (provider calls included)",
            serial.seconds * 1000 / max(_settled(serial), 1),
            "ms",
        ),
    ]


def statements_section(timed: list[TimedPass]) -> Section:
    rows = [
        [
            f"{t.attempts:,}",
            str(t.concurrency),
            f"{t.statements:,}",
            f"{t.per_attempt:.3f}",
            f"{t.reconciler_cpu * 1000 / t.attempts:.2f}",
            f"{t.provider_cpu * 1000 / t.attempts:.2f}",
            f"{(t.reconciler_cpu + t.provider_cpu) / t.seconds:.2f}",
        ]
        for t in timed
    ]
    body = table(
        [
            "attempts",
            "at once",
            "statements",
            "per attempt",
            "reconciler CPU ms/attempt",
            "provider CPU ms/attempt",
            "cores busy (both)",
        ],
        rows,
    )
    note = (
        "Half rolled forward, half fenced and rolled back; every request finished. "
        "Every statement the pass sent, BEGIN and COMMIT included: per batch the "
        "claim, the settlement's transaction and the completion's, whatever the "
        "batch's size; one more claim (the empty one) ends the pass. CPU: this "
        "process (the pass and its asking threads) and the sandbox's gunicorn, over "
        "the pass (PostgreSQL's not counted)."
    )
    return Section("Statements and CPU per attempt", f"{body}\n\n{note}")


def outcome_section(timed: TimedPass) -> Section:
    rows = [[name, f"{value:,}"] for name, value in timed.counts.items()]
    title = f"Outcome of the pass over {timed.attempts:,}, {timed.concurrency} question(s) at once"
    return Section(title, table(["count", "value"], rows))


SUITE = Suite(name="reconcile", title="Reconcile pass (unknown payments)", run=run)


def _standalone_run(ctx: BenchContext, args: argparse.Namespace) -> SuiteResult:
    attempts = args.size or (QUICK_ATTEMPTS if args.quick else ATTEMPTS)
    limit_s = QUICK_PASS_LIMIT_S if args.quick else PASS_LIMIT_S
    return run_sized(ctx, attempts=attempts, limit_s=limit_s)


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from tools.bench.database import database_name
    from tools.bench.standalone import service_urls

    sys.exit(
        standalone(
            name="reconcile_pass",
            database_name=database_name(service_urls()[0]) + STANDALONE_SUFFIX,
            argv=sys.argv[1:],
            suite_run=_standalone_run,
        )
    )
