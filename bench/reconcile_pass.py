"""One reconciler pass over many unknown payment attempts, against the sandbox over HTTP.

What a provider outage leaves behind: N attempts UNKNOWN, each with its
request stuck at ``payment_created``; the provider charged half of them before
it went quiet and never saw the other half. One ``reconcile`` pass then asks
the provider about each (gunicorn serving the sandbox, as deployed), rolls the
charged ones forward (PAID, ledger entry), fences and fails the others, and
finishes every request with its final answer.

Figures:

* **attempts/s** of the whole pass (claim, 1-2 provider calls, settle, finish);
* **SQL statements per attempt** at two batch sizes (``CaptureQueriesContext``):
  the statements each attempt costs must not depend on the batch (no N+1, no
  per-batch work that grows with it); the per-batch statements (the claim, the
  lookup of the batch's records) are counted apart.

Runs as a registered suite (``SUITE``; add it to ``bench/suites.py``) or alone:

    python -m bench.reconcile_pass            # 10,000 attempts
    python -m bench.reconcile_pass --quick    # 1,000
    python -m bench.reconcile_pass --attempts 2000

Alone, it uses its own database (``onceshop_bench_reconcile``), so it never
disturbs a ``make bench`` running at the same time.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.appserver import Server
from bench.context import BenchContext, Section, Suite, SuiteResult
from bench.harness import HttpRequest, measure
from bench.markdown import table
from bench.standalone import standalone
from bench.stats import Metric, Target, Throughput, ratio

if TYPE_CHECKING:  # Django models and the provider import only after django.setup()
    from payments.providers import PaymentProvider

ATTEMPTS, QUICK_ATTEMPTS = 10_000, 1_000
# The query-count runs: enough attempts for several batches at both sizes.
COUNTED_ATTEMPTS = 100
COUNTED_BATCH_SIZES = (10, 50)
# The pass stops taking work after this long (its own budget): a bounded run
# on a slow, shared machine reports what it did in the time instead of hanging.
PASS_LIMIT_S, QUICK_PASS_LIMIT_S = 600.0, 120.0
AMOUNT = 1999
# Enqueued fulfil tasks go to a queue of their own, emptied afterwards: no worker
# of the demo or the tests must see the bench's orders.
BENCH_QUEUE = "onceshop-bench-reconcile"
STANDALONE_DATABASE = "onceshop_bench_reconcile"

PER_ATTEMPT_TARGET = Target("<=", 0)  # the difference between the two batch sizes
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

    from idempotency.models import IdempotencyKey
    from orders.models import Order
    from payments.flows import PayPoint
    from payments.models import Payment, PaymentStatus
    from sandbox.models import Charge, Wallet

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


def _per_batch(sql: str) -> bool:
    """The statements a batch costs whatever its size: the claim, the records' lookup."""
    claim = sql.lstrip().startswith("UPDATE") and "RETURNING" in sql
    lookup = '"idempotency_idempotencykey"' in sql and '"resource_id" IN' in sql
    return claim or lookup


@dataclass(frozen=True)
class CountedPass:
    batch_size: int
    attempts: int
    per_attempt: float
    per_batch_statements: int
    total: int


def counted_pass(
    *, ctx: BenchContext, provider: PaymentProvider, batch_size: int, tag: str
) -> CountedPass:
    """A pass over COUNTED_ATTEMPTS fresh attempts, every statement captured."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from reconcile.services import payments

    seed_unknown_attempts(user_id=ctx.user_id, count=COUNTED_ATTEMPTS, tag=tag)
    with CaptureQueriesContext(connection) as captured:
        counts = payments.run_once(provider=provider, batch_size=batch_size)
    if counts.completed != COUNTED_ATTEMPTS:
        raise RuntimeError(f"counted pass (batch {batch_size}) finished {counts}")
    statements = [query["sql"] for query in captured.captured_queries]
    per_batch = sum(1 for sql in statements if _per_batch(sql))
    return CountedPass(
        batch_size=batch_size,
        attempts=COUNTED_ATTEMPTS,
        per_attempt=(len(statements) - per_batch) / COUNTED_ATTEMPTS,
        per_batch_statements=per_batch,
        total=len(statements),
    )


@dataclass(frozen=True)
class TimedPass:
    attempts: int
    seconds: float
    counts: dict[str, int]
    concurrency: int


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
    *, provider: PaymentProvider, attempts: int, limit_s: float, concurrency: int
) -> TimedPass:
    """One pass over the seeded attempts, timed, nothing captured."""
    import dataclasses

    from reconcile.services import payments

    started = time.perf_counter()
    counts = payments.run_once(provider=provider, budget_s=limit_s, concurrency=concurrency)
    return TimedPass(
        attempts, time.perf_counter() - started, dataclasses.asdict(counts), concurrency
    )


def run(ctx: BenchContext) -> SuiteResult:
    attempts = QUICK_ATTEMPTS if ctx.options.quick else ATTEMPTS
    limit_s = QUICK_PASS_LIMIT_S if ctx.options.quick else PASS_LIMIT_S
    return run_sized(ctx, attempts=attempts, limit_s=limit_s)


def run_sized(ctx: BenchContext, *, attempts: int, limit_s: float) -> SuiteResult:
    from django.conf import settings

    from payments.models import Payment
    from reconcile.services import payments

    with ctx.server("reconcile-sandbox") as server, reconciler_settings(ctx.redis_url):
        provider = sandbox_provider(server.port)
        # Earlier suites share the bench database and may leave attempts unsettled
        # (the callback suite pre-creates more than it uses): settle them first, so
        # each counted pass sees exactly its own attempts.
        payments.run_once(provider=provider)
        counted = [
            counted_pass(ctx=ctx, provider=provider, batch_size=size, tag=f"Q{size}")
            for size in COUNTED_BATCH_SIZES
        ]
        # The same work twice: one question at a time (as before), then concurrently.
        timed = []
        for tag, concurrency in (("S", 1), ("T", settings.RECONCILE_CONCURRENCY)):
            ids = seed_unknown_attempts(user_id=ctx.user_id, count=attempts, tag=tag)
            if concurrency > 1:
                refs = list(
                    Payment.objects.filter(pk__in=ids[::2]).values_list("out_trade_no", flat=True)
                )
                ceiling = provider_ceiling(ctx, server, refs)
            timed.append(
                timed_pass(
                    provider=provider, attempts=attempts, limit_s=limit_s, concurrency=concurrency
                )
            )
    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        throughputs=[ceiling],
        metrics=metrics(counted, timed, ceiling),
        sections=[counted_section(counted), *(outcome_section(t) for t in timed)],
    )


# --- Figures --------------------------------------------------------------------------------------


def _settled(timed: TimedPass) -> int:
    return sum(timed.counts[k] for k in ("rolled_forward", "rolled_back", "already_settled"))


def metrics(
    counted: list[CountedPass], timed: list[TimedPass], ceiling: Throughput
) -> list[Metric]:
    small, large = counted
    serial, concurrent = timed
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
                f"reconcile_attempts_per_s_c{t.concurrency}",
                f"attempts/s, one pass over {t.attempts:,}, {t.concurrency} question(s) at once",
                rate,
                note=f"{_settled(t):,} settled in {t.seconds:.1f} s",
            )
            for t, rate in zip(timed, rates, strict=True)
        ),
        Metric(
            "reconcile_vs_ceiling",
            f"attempts/s ({concurrent.concurrency} at once) / provider ceiling",
            ratio(rates[1], ceiling.per_second),
            "x",
            CEILING_TARGET,
            "an attempt costs 1.5 provider calls on average (half need the fence)",
        ),
        Metric(
            "reconcile_concurrent_vs_serial",
            "attempts/s, concurrent / one at a time",
            ratio(rates[1], rates[0]),
            "x",
        ),
        *(
            Metric(
                f"reconcile_queries_per_attempt_batch_{c.batch_size}",
                f"SQL statements per attempt, batch of {c.batch_size}",
                c.per_attempt,
                note=f"+{c.per_batch_statements} per-batch statements; {c.total} in all",
            )
            for c in counted
        ),
        Metric(
            "reconcile_queries_per_attempt_difference",
            "per-attempt statements, batch 50 - batch 10",
            abs(large.per_attempt - small.per_attempt),
            target=PER_ATTEMPT_TARGET,
            note="0: the cost of an attempt does not grow with the batch",
        ),
        Metric(
            "reconcile_ms_per_attempt",
            "ms per attempt, serial pass (provider calls included)",
            serial.seconds * 1000 / max(_settled(serial), 1),
            "ms",
        ),
    ]


def counted_section(counted: list[CountedPass]) -> Section:
    rows = [
        [
            str(c.batch_size),
            str(c.attempts),
            str(c.total),
            str(c.per_batch_statements),
            f"{c.per_attempt:.2f}",
        ]
        for c in counted
    ]
    body = table(
        ["batch size", "attempts", "statements", "per-batch statements", "per attempt"], rows
    )
    note = (
        "Half rolled forward, half fenced and rolled back; every request finished. "
        "Per-batch statements: the claim (`UPDATE ... RETURNING`, one more for the "
        "empty claim that ends the pass) and the lookup of the batch's records."
    )
    return Section("Statements per attempt at two batch sizes", f"{body}\n\n{note}")


def outcome_section(timed: TimedPass) -> Section:
    rows = [[name, f"{value:,}"] for name, value in timed.counts.items()]
    title = f"Outcome of the timed pass, {timed.concurrency} question(s) at once"
    return Section(title, table(["count", "value"], rows))


SUITE = Suite(name="reconcile", title="Reconcile pass (unknown payments)", run=run)


def _standalone_run(ctx: BenchContext, args: argparse.Namespace) -> SuiteResult:
    attempts = args.size or (QUICK_ATTEMPTS if args.quick else ATTEMPTS)
    limit_s = QUICK_PASS_LIMIT_S if args.quick else PASS_LIMIT_S
    return run_sized(ctx, attempts=attempts, limit_s=limit_s)


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.exit(
        standalone(
            name="reconcile_pass",
            database_name=STANDALONE_DATABASE,
            argv=sys.argv[1:],
            suite_run=_standalone_run,
        )
    )
