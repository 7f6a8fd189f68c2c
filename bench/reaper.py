"""The reaper over a million expired idempotency records.

Retention (IDEMPOTENCY_KEY_TTL, 24 h) means a busy shop reaps as many records
a day as it serves requests. ``idempotency_key_reap`` deletes them a batch per
transaction (``DELETE ... WHERE id IN (SELECT ... LIMIT n FOR UPDATE SKIP
LOCKED)``), so it never holds a lock long enough to stall the requests that
insert records into the same table. The figures:

* **rows/s** deleted;
* **longest single batch** (transaction, and so lock) the reaper held, and the
  mean: the number that matters to live traffic;
* that fresh records (inside the window) and unfinished ones (whatever their
  age) are all still there afterwards.

Runs as a registered suite (``SUITE``; add it to ``bench/suites.py``) or alone:

    python -m bench.reaper                 # 1,000,000 expired records
    python -m bench.reaper --quick         # 100,000
    python -m bench.reaper --size 300000

Alone, it uses its own database (``onceshop_bench_reaper``), dropped afterwards.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench.context import BenchContext, Section, Suite, SuiteResult
from bench.markdown import table
from bench.standalone import standalone
from bench.stats import Metric, Target

EXPIRED, QUICK_EXPIRED = 1_000_000, 100_000
# Kept whatever happens: inside the window, and unfinished past it.
FRESH, UNFINISHED = 10_000, 1_000
# Rows per INSERT statement when seeding: large enough to be quick, small enough
# that one statement never holds a huge transaction.
SEED_CHUNK = 100_000
# A batch is one short transaction. A request that needs one of its rows waits at
# most that long: a fraction of DATABASE_LOCK_TIMEOUT_MS (5 s), and no stall a
# customer would notice, even on a busy 2-core machine.
LONGEST_BATCH_TARGET = Target("<=", 250)
STANDALONE_DATABASE = "onceshop_bench_reaper"

_SEED_SQL = """
    INSERT INTO idempotency_idempotencykey (
        user_id, key, fingerprint, method, path, recovery_point, lock_token, locked_at,
        response_status, response_body, response_headers, resource_type, resource_id,
        created_at, finished_at)
    SELECT %(user)s, %(prefix)s::text || g::text, repeat('0', 64), 'POST', '/api/v1/orders/',
        %(point)s, NULL, NULL, %(status)s, %(body)s, '{}'::jsonb, 'order', g,
        %(at)s::timestamptz - g * interval '1 millisecond',
        %(finished)s::timestamptz - g * interval '1 millisecond'
    FROM generate_series(%(start)s, %(stop)s) AS g
"""


def seed(*, user_id: int, expired: int) -> None:
    """``expired`` finished records past the window, plus fresh and unfinished ones."""
    from datetime import timedelta

    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    now = timezone.now()
    old = now - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL + 3600)
    body = '{"number": "20260101-0000000000", "status": "UNPAID"}'
    batches = [
        ("expired-", "finished", 201, body, old, old, expired),
        ("fresh-", "finished", 201, body, now, now, FRESH),
        # Unfinished and as old as the expired ones: a reaper must never take these.
        ("unfinished-", "payment_created", None, "", old, None, UNFINISHED),
    ]
    with connection.cursor() as cursor:
        for prefix, point, status, response, at, finished, count in batches:
            for start in range(1, count + 1, SEED_CHUNK):
                params: dict[str, Any] = {
                    "user": user_id,
                    "prefix": prefix,
                    "point": point,
                    "status": status,
                    "body": response,
                    "at": at,
                    "finished": finished,
                    "start": start,
                    "stop": min(count, start + SEED_CHUNK - 1),
                }
                cursor.execute(_SEED_SQL, params)
        # Fresh statistics: the planner must know the table is big (as it would be).
        cursor.execute("ANALYZE idempotency_idempotencykey")


@dataclass(frozen=True)
class ReapFigures:
    expired: int
    deleted: int
    batches: int
    seconds: float
    longest_batch_s: float
    fresh_kept: int
    unfinished_kept: int


def reap(*, user_id: int, expired: int) -> ReapFigures:
    from idempotency.models import IdempotencyKey, RecoveryPoint
    from idempotency.services import idempotency_key_reap

    seed(user_id=user_id, expired=expired)
    started = time.perf_counter()
    result = idempotency_key_reap()
    seconds = time.perf_counter() - started
    left = IdempotencyKey.objects.filter(user_id=user_id)
    return ReapFigures(
        expired=expired,
        deleted=result.deleted,
        batches=result.batches,
        seconds=seconds,
        longest_batch_s=result.longest_batch_s,
        fresh_kept=left.filter(key__startswith="fresh-").count(),
        unfinished_kept=left.exclude(recovery_point=RecoveryPoint.FINISHED).count(),
    )


def run(ctx: BenchContext) -> SuiteResult:
    return run_sized(ctx, expired=QUICK_EXPIRED if ctx.options.quick else EXPIRED)


def run_sized(ctx: BenchContext, *, expired: int) -> SuiteResult:
    figures = reap(user_id=ctx.user_id, expired=expired)
    if (figures.deleted, figures.fresh_kept, figures.unfinished_kept) != (
        expired,
        FRESH,
        UNFINISHED,
    ):
        raise RuntimeError(f"the reaper deleted the wrong rows: {figures}")
    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        metrics=[
            Metric(
                "reaper_rows_per_s",
                f"rows/s, reaping {expired:,} expired records",
                figures.deleted / figures.seconds,
                note=f"{figures.deleted:,} in {figures.seconds:.1f} s",
            ),
            Metric(
                "reaper_longest_batch_ms",
                "longest single batch (transaction, lock held)",
                figures.longest_batch_s * 1000,
                "ms",
                LONGEST_BATCH_TARGET,
            ),
            Metric(
                "reaper_mean_batch_ms",
                "mean batch",
                figures.seconds * 1000 / figures.batches,
                "ms",
                note=f"{figures.batches:,} batches of up to 1,000 (the last one partial)",
            ),
        ],
        sections=[
            Section(
                "What the reaper kept",
                table(
                    ["records", "seeded", "left"],
                    [
                        ["expired (finished past the window)", f"{expired:,}", "0"],
                        ["fresh (inside the window)", f"{FRESH:,}", f"{figures.fresh_kept:,}"],
                        [
                            "unfinished, as old as the expired",
                            f"{UNFINISHED:,}",
                            f"{figures.unfinished_kept:,}",
                        ],
                    ],
                ),
            )
        ],
    )


SUITE = Suite(name="reaper", title="Reaper (expired idempotency records)", run=run)


def _standalone_run(ctx: BenchContext, args: argparse.Namespace) -> SuiteResult:
    return run_sized(ctx, expired=args.size or (QUICK_EXPIRED if args.quick else EXPIRED))


if __name__ == "__main__":
    sys.exit(
        standalone(
            name="reaper",
            database_name=STANDALONE_DATABASE,
            argv=sys.argv[1:],
            suite_run=_standalone_run,
        )
    )
