"""The daily statement: a day of many lines downloaded, imported and matched.

One day's statement of N captures, served by the sandbox under gunicorn (as
deployed) and streamed over HTTP; ``statement_reconcile`` reads it as it
arrives, inserts it in chunks and matches it against N ledger entries. Every
line matches: the figure is the cost of a normal day, not of its exceptions
(those ask the provider, one call each, like the per-attempt reconciler).

Figures, at two sizes (10,000 and 100,000 lines; ``--quick``: 1,000 and 10,000):

* **lines/s**, download + import + matching, one importer;
* **SQL statements per 1,000 lines** (``CaptureQueriesContext``), which must not
  grow with the statement: the import is one INSERT per chunk and the matching
  four statements per batch, whatever the day's size.

Seeded in bulk, straight into both sides' tables (as the reconcile suite does):
a hundred thousand charges through the sandbox's HTTP API would measure the
sandbox's charge path for minutes, not the statement.

    python -m bench.statement            # 10,000 and 100,000 lines
    python -m bench.statement --quick    # 1,000 and 10,000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as day_time

from bench.context import BenchContext, Section, Suite, SuiteResult
from bench.markdown import table
from bench.reconcile_pass import sandbox_provider, standalone
from bench.stats import Metric, Target

SIZES, QUICK_SIZES = (10_000, 100_000), (1_000, 10_000)
AMOUNT = 1999
SEED_CHUNK = 5_000
STANDALONE_DATABASE = "onceshop_bench_statement"
LINES_PER_S_TARGET = Target(">=", 5_000)
# The statements per 1,000 lines of the larger day may not exceed the smaller's.
GROWTH_TARGET = Target("<=", 0)


def seed_day(*, user_id: int, day: date, count: int) -> None:
    """``count`` PAID orders settled on ``day``: on our side the order, its SUCCEEDED
    attempt and its capture entry; at the provider the SUCCESS charge."""
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from orders.models import Order
    from payments.models import LedgerEntry, Payment, PaymentStatus
    from sandbox.models import Charge, Wallet

    payer = get_user_model().objects.get(pk=user_id).get_username()
    Wallet.objects.bulk_create(
        [Wallet(payer=payer, balance=settings.SANDBOX_WALLET_START)], ignore_conflicts=True
    )
    wallet = Wallet.objects.get(payer=payer)
    noon = datetime.combine(day, day_time(12), tzinfo=UTC)
    tag = day.strftime("%Y%m%d")
    for start in range(0, count, SEED_CHUNK):
        numbers = range(start, min(start + SEED_CHUNK, count))
        orders = Order.objects.bulk_create(
            Order(
                number=f"S{tag}-{i:07d}",
                user_id=user_id,
                amount=AMOUNT,
                currency="CNY",
                status=Order.Status.PAID,
                paid_at=noon,
            )
            for i in numbers
        )
        payments = Payment.objects.bulk_create(
            Payment(
                order=order,
                out_trade_no=f"PS{tag}{i:07d}",
                trade_no=f"TS{tag}{i:07d}",
                status=PaymentStatus.SUCCEEDED,
                amount=AMOUNT,
                currency="CNY",
                payer=payer,
                settled_at=noon,
            )
            for i, order in zip(numbers, orders, strict=True)
        )
        entries = LedgerEntry.objects.bulk_create(
            LedgerEntry(
                order_id=p.order_id,
                payment=p,
                trade_no=p.out_trade_no.replace("PS", "TS", 1),
                amount=AMOUNT,
                currency="CNY",
            )
            for p in payments
        )
        LedgerEntry.objects.filter(pk__in=[e.pk for e in entries]).update(created_at=noon)
        Charge.objects.bulk_create(
            Charge(
                trade_no=p.out_trade_no.replace("PS", "TS", 1),
                out_trade_no=p.out_trade_no,
                status=Charge.Status.SUCCESS,
                wallet=wallet,
                amount=AMOUNT,
                currency="CNY",
                notify_url="http://127.0.0.1:9/",
                paid_at=noon + timedelta(milliseconds=i),
            )
            for i, p in zip(numbers, payments, strict=True)
        )


@dataclass(frozen=True)
class DayRun:
    lines: int
    seconds: float
    download_s: float  # download, parse and insert (one transaction)
    match_s: float
    statements: int
    counts: dict[str, int]

    @property
    def per_second(self) -> float:
        return self.lines / self.seconds

    @property
    def per_thousand(self) -> float:
        return self.statements * 1000 / self.lines


def run_day(*, ctx: BenchContext, port: int, day: date, count: int) -> DayRun:
    import dataclasses

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from reconcile.services.statements import (
        statement_download,
        statement_import_row,
        statement_match,
    )

    print(f"bench: seeding {count:,} settled charges on {day} ...", flush=True)
    seed_day(user_id=ctx.user_id, day=day, count=count)
    provider = sandbox_provider(port)
    # The steps of statement_reconcile, timed one by one.
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        statement = statement_import_row(day=day)
        downloaded, added = statement_download(statement=statement, provider=provider)
        downloaded_at = time.perf_counter()
        counts = statement_match(statement=statement, provider=provider)
        finished = time.perf_counter()
    if (downloaded, added, counts.matched) != (count, count, count):
        raise RuntimeError(f"statement of {day}: {downloaded} read, {added} new, {counts}")
    summary = {k: v for k, v in dataclasses.asdict(counts).items() if k != "day"}
    return DayRun(
        lines=count,
        seconds=finished - started,
        download_s=downloaded_at - started,
        match_s=finished - downloaded_at,
        statements=len(captured.captured_queries),
        counts=summary,
    )


def run(ctx: BenchContext) -> SuiteResult:
    return run_sized(ctx, sizes=QUICK_SIZES if ctx.options.quick else SIZES)


def run_sized(ctx: BenchContext, *, sizes: tuple[int, ...]) -> SuiteResult:
    # Past days of their own: nothing else of the bench lands on them.
    days = [date(2020, 1, 1) + timedelta(days=i) for i in range(len(sizes))]
    with ctx.server("statement-sandbox") as server:
        runs = [
            run_day(ctx=ctx, port=server.port, day=day, count=size)
            for day, size in zip(days, sizes, strict=True)
        ]
    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        metrics=metrics(runs),
        sections=[section(runs)],
    )


def metrics(runs: list[DayRun]) -> list[Metric]:
    small, large = runs[0], runs[-1]
    return [
        *(
            Metric(
                f"statement_lines_per_s_{r.lines}",
                f"lines/s, a day of {r.lines:,} lines (download, import, match)",
                r.per_second,
                target=LINES_PER_S_TARGET,
                note=f"{r.seconds:.1f} s, 1 importer",
            )
            for r in runs
        ),
        *(
            Metric(
                f"statement_queries_per_1000_lines_{r.lines}",
                f"SQL statements per 1,000 lines, a day of {r.lines:,}",
                r.per_thousand,
                note=f"{r.statements:,} in all",
            )
            for r in runs
        ),
        Metric(
            "statement_queries_growth",
            f"statements per 1,000 lines, {large.lines:,} - {small.lines:,}",
            large.per_thousand - small.per_thousand,
            target=GROWTH_TARGET,
            note="<= 0: the cost of a line does not grow with the day",
        ),
    ]


def section(runs: list[DayRun]) -> Section:
    rows = [
        [
            f"{r.lines:,}",
            f"{r.seconds:.1f}",
            f"{r.download_s:.1f}",
            f"{r.match_s:.1f}",
            f"{r.per_second:,.0f}",
            f"{r.statements:,}",
            f"{r.per_thousand:.1f}",
        ]
        for r in runs
    ]
    body = table(
        [
            "lines",
            "seconds",
            "download + import s",
            "matching s",
            "lines/s",
            "statements",
            "per 1,000 lines",
        ],
        rows,
    )
    note = (
        "Every line a capture that matches its ledger entry. The download is "
        "streamed into one COPY and one INSERT ... SELECT inside one transaction; "
        "the matching runs four statements per batch of 1,000 pending lines, plus a "
        "fixed few per day."
    )
    return Section("A day's statement at two sizes", f"{body}\n\n{note}")


SUITE = Suite(name="statement", title="Daily statement (import and match)", run=run)


def _standalone_run(ctx: BenchContext, args: argparse.Namespace) -> SuiteResult:
    sizes = (args.size // 10, args.size) if args.size else (QUICK_SIZES if args.quick else SIZES)
    return run_sized(ctx, sizes=sizes)


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.exit(
        standalone(
            name="statement",
            database_name=STANDALONE_DATABASE,
            argv=sys.argv[1:],
            suite_run=_standalone_run,
        )
    )
