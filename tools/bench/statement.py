"""The daily statement: a day of many lines downloaded, imported and matched.

One day's statement of N lines (charges, and a refund of one charge in ten),
served by the sandbox under gunicorn (as deployed) and streamed over HTTP;
``statement_reconcile`` reads it as it arrives, inserts it in chunks and
matches it against N ledger entries. Every line matches: the figure is the cost
of a normal day, not of its exceptions (those ask the provider, one call each,
like the per-attempt reconciler).

Figures, at two sizes (10,000 and 100,000 lines; ``--quick``: 1,000 and 10,000):

* **lines/s**, download + import + matching, one importer;
* **SQL statements per 1,000 lines** (``CaptureQueriesContext``), which must not
  grow with the statement: the import is one INSERT per chunk and the matching
  four statements per batch, whatever the day's size.

Seeded through both sides' own services, in-process (not HTTP), in a few
forked processes (``seed_day``): every charge and refund is made by the
sandbox's ``charge_create`` / ``refund_create`` and settled in the shop by
``payment_settle`` / ``refund_create`` + ``refund_settle`` with the sandbox's
answer. Only the orders and their PENDING attempts are inserted in bulk, and the
day's rows are then moved from "now" to a past day of their own. The seeding is
timed and reported, but is not part of lines/s.

    python -m tools.bench.statement            # 10,000 and 100,000 lines
    python -m tools.bench.statement --quick    # 1,000 and 10,000
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as day_time

from tools.bench.context import BenchContext, Section, Suite, SuiteResult
from tools.bench.markdown import table
from tools.bench.reconcile_pass import sandbox_provider, standalone
from tools.bench.stats import Metric, Target

SIZES, QUICK_SIZES = (10_000, 100_000), (1_000, 10_000)
AMOUNT = 1999
SEED_CHUNK = 5_000
# One charge in REFUND_EVERY is refunded the same day (a refund line of its own).
REFUND_EVERY = 10
# Seeding processes (charges and refunds through the services, one row at a time):
# more than the cores, since each spends much of its time waiting on a COMMIT.
SEED_PROCESSES = int(os.environ.get("BENCH_SEED_PROCESSES", "4"))
# Its own database (dropped and created): another name on a shared server, by env.
STANDALONE_DATABASE = os.environ.get("BENCH_STATEMENT_DATABASE", "onceshop_bench_statement")
LINES_PER_S_TARGET = Target(">=", 5_000)
# The statements per 1,000 lines of the larger day may not exceed the smaller's.
GROWTH_TARGET = Target("<=", 0)


def day_mix(lines: int) -> tuple[int, int]:
    """(charges, refunds) of a day of ``lines`` lines: one charge in ten refunded."""
    charges = -(-lines * REFUND_EVERY // (REFUND_EVERY + 1))
    return charges, lines - charges


def seed_day(*, user_id: int, day: date, lines: int, processes: int = SEED_PROCESSES) -> float:
    """A day of ``lines`` statement lines, through both sides' own services; seconds taken.

    Shop: the orders and their PENDING attempts are inserted in bulk (the state
    the pay flow's first phase commits). Then every charge is made by the
    sandbox's ``charge_create`` (idempotency record, wallet debit, charge row,
    in one transaction, as its HTTP API does) and settled in the shop by
    ``payment_settle`` with the sandbox's answer (SUCCEEDED, capture entry,
    order PAID); one order in ten is then refunded: ``refund_create`` in the
    shop, the sandbox's ``refund_create``, ``refund_settle``. In-process, in
    ``processes`` forked processes, each with its own connections.

    Services stamp "now"; the day's rows are then moved to ``day`` (noon plus one
    millisecond per row), so each size has a past day of its own.
    """
    from django.conf import settings
    from django.db import connections

    from config.celery import app
    from orders.models import Order
    from payments.models import Payment

    charges, refunds = day_mix(lines)
    tag = day.strftime("%Y%m%d")
    # Payers of their own, rich enough for the day: wallets start at SANDBOX_WALLET_START.
    settings.SANDBOX_WALLET_START = AMOUNT * lines * 2
    for start in range(0, charges, SEED_CHUNK):
        numbers = range(start, min(start + SEED_CHUNK, charges))
        orders = Order.objects.bulk_create(
            Order(number=f"S{tag}-{i:07d}", user_id=user_id, amount=AMOUNT, currency="CNY")
            for i in numbers
        )
        Payment.objects.bulk_create(
            Payment(
                order=order,
                out_trade_no=f"PS{tag}{i:07d}",
                amount=AMOUNT,
                currency="CNY",
                payer=_payer(tag, i % processes),
            )
            for i, order in zip(numbers, orders, strict=True)
        )
    started = time.perf_counter()
    connections.close_all()  # a forked child must never share the parent's socket
    context = multiprocessing.get_context("fork")
    with context.Pool(processes) as pool:
        done = pool.starmap(
            _seed_rows,
            [
                (user_id, tag, _payer(tag, k), range(k, charges, processes), refunds)
                for k in range(processes)
            ],
        )
    seconds = time.perf_counter() - started
    if sum(done) != lines:
        raise RuntimeError(f"seeded {sum(done)} lines of {lines}")
    _move_to_day(tag=tag, day=day)
    # The sandbox's notifications and payment_settle's fulfilments went to the queue;
    # no worker serves the bench (the shop settled from the answers here).
    app.control.purge()
    return seconds


def _payer(tag: str, process: int) -> str:
    # A wallet per seeding process: one wallet row for all would serialize them.
    return f"statement-{tag}-{process}"


def _seed_rows(user_id: int, tag: str, payer: str, numbers: range, refunds: int) -> int:
    """Charge (and refund) the attempts ``numbers`` of the day ``tag``: lines made."""
    import json
    import logging

    from django.conf import settings
    from django.core.serializers.json import DjangoJSONEncoder
    from django.db import connections

    from demo.sandbox.services.charges import charge_create
    from demo.sandbox.services.refunds import refund_create as provider_refund_create
    from payments.models import Payment
    from payments.providers.sandbox_parsing import parse_charge, parse_refund
    from payments.refunds import refund_create, refund_provider_key, refund_settle
    from payments.services import Settlement, payment_settle

    def as_json(body: dict[str, object]) -> object:
        # What the HTTP API would have sent: the adapter parses that, not Python objects.
        return json.loads(json.dumps(body, cls=DjangoJSONEncoder))

    # A log line per charge would cost more than the charge; warnings still show.
    logging.disable(logging.INFO)
    notify_url = f"{settings.SHOP_BASE_URL}/api/v1/callbacks/sandbox/"
    payments = dict(
        Payment.objects.filter(out_trade_no__startswith=f"PS{tag}").values_list(
            "out_trade_no", "pk"
        )
    )
    made = 0
    try:
        for i in numbers:
            out_trade_no = f"PS{tag}{i:07d}"
            answer = charge_create(
                idempotency_key=f"bench-{out_trade_no}",
                out_trade_no=out_trade_no,
                amount=AMOUNT,
                currency="CNY",
                payer=payer,
                notify_url=notify_url,
            )
            charged = payment_settle(
                payment_id=payments[out_trade_no], result=parse_charge(as_json(answer.body))
            )
            if charged.outcome is not Settlement.APPLIED or charged.payment.status != "SUCCEEDED":
                raise RuntimeError(f"{out_trade_no}: {charged}")
            made += 1
            if i >= refunds:
                continue
            refund = refund_create(
                user_id=user_id,
                is_staff=True,
                order_number=f"S{tag}-{i:07d}",
                amount=None,
                reason="statement bench",
            )
            answer = provider_refund_create(
                idempotency_key=refund_provider_key(refund),
                out_refund_no=refund.refund_no,
                out_trade_no=out_trade_no,
                amount=refund.amount,
                notify_url=notify_url,
            )
            refunded = refund_settle(
                refund_attempt_id=refund.pk, result=parse_refund(as_json(answer.body))
            )
            if refunded.outcome is not Settlement.APPLIED or refunded.refund.status != "SUCCEEDED":
                raise RuntimeError(f"{refund.refund_no}: {refunded}")
            made += 1
    finally:
        connections.close_all()
    return made


# The day's rows, moved from "now" to the bench's day: the shop's ledger entries and
# settlement times, and the provider's settlement times (which the statement lists by).
_MOVE_TO_DAY = (
    """UPDATE sandbox_charge SET paid_at = %(noon)s + (id %% 3600000) * interval '1 ms'
       WHERE out_trade_no LIKE %(attempts)s""",
    """UPDATE sandbox_refund AS r SET refunded_at = %(noon)s + (r.id %% 3600000)
       * interval '1 ms' FROM sandbox_charge AS c
       WHERE r.charge_id = c.id AND c.out_trade_no LIKE %(attempts)s""",
    """UPDATE payments_payment SET settled_at = %(noon)s WHERE out_trade_no LIKE %(attempts)s""",
    """UPDATE payments_refund AS r SET settled_at = %(noon)s FROM payments_payment AS p
       WHERE r.payment_id = p.id AND p.out_trade_no LIKE %(attempts)s""",
    """UPDATE payments_ledgerentry AS e SET created_at = %(noon)s FROM payments_payment AS p
       WHERE e.payment_id = p.id AND p.out_trade_no LIKE %(attempts)s""",
    """UPDATE orders_order SET paid_at = %(noon)s WHERE number LIKE %(orders)s""",
)


def _move_to_day(*, tag: str, day: date) -> None:
    from django.db import connection, transaction

    params: dict[str, datetime | str] = {
        "noon": datetime.combine(day, day_time(12), tzinfo=UTC),
        "attempts": f"PS{tag}%",
        "orders": f"S{tag}-%",
    }
    with transaction.atomic(), connection.cursor() as cursor:
        for sql in _MOVE_TO_DAY:
            cursor.execute(sql, params)


@dataclass(frozen=True)
class DayRun:
    lines: int
    seed_s: float  # charges and refunds through both sides' services
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


def seed(*, ctx: BenchContext, day: date, count: int) -> float:
    charges, refunds = day_mix(count)
    print(
        f"bench: seeding {charges:,} charges and {refunds:,} refunds on {day} "
        f"through the services, {SEED_PROCESSES} processes ...",
        flush=True,
    )
    seed_s = seed_day(user_id=ctx.user_id, day=day, lines=count)
    print(f"bench: seeded in {seed_s:.0f} s", flush=True)
    return seed_s


def run_day(*, port: int, day: date, count: int, seed_s: float) -> DayRun:
    import dataclasses

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from operations.statements.importing import (
        statement_download,
        statement_import_row,
        statement_match,
    )

    print(f"bench: importing and matching the statement of {day} ...", flush=True)
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
        seed_s=seed_s,
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
    # Every day seeded first, then every statement imported: the imports are timed
    # back to back, under the same conditions.
    seeding = [seed(ctx=ctx, day=day, count=size) for day, size in zip(days, sizes, strict=True)]
    with ctx.server("statement-sandbox") as server:
        runs = [
            run_day(port=server.port, day=day, count=size, seed_s=seed_s)
            for day, size, seed_s in zip(days, sizes, seeding, strict=True)
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
            f"{r.seed_s:.0f}",
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
            "seeding s",
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
        "Every line a charge or a refund (one charge in ten refunded) that matches "
        "its ledger entry; seeded through the sandbox's and the shop's services "
        f"({SEED_PROCESSES} processes; seeding s is that, not part of lines/s). The download is "
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
