"""The reaper over a million expired idempotency records.

``idempotency_key_reap`` deletes a batch per transaction (``... FOR UPDATE SKIP
LOCKED``), so it never holds a lock long enough to stall the requests inserting
into the same table. Figures: rows/s, the longest single batch (the lock live
traffic may wait on), and that fresh and unfinished records all survive.

    python -m tools.bench.reaper                 # alone, on onceshop_bench_reaper (dropped after)
    python -m tools.bench.reaper --quick         # 100,000
    python -m tools.bench.reaper --size 300000
"""

from __future__ import annotations

import argparse
import sys
import time

from tools.bench.context import BenchContext, Section, Suite, SuiteResult
from tools.bench.markdown import table
from tools.bench.standalone import standalone
from tools.bench.stats import Figure, Target, figures

EXPIRED, QUICK_EXPIRED = 1_000_000, 100_000
# Kept whatever happens: inside the window, and unfinished past it.
FRESH, UNFINISHED = 10_000, 1_000
# Rows per INSERT statement when seeding: large enough to be quick, small enough
# that one statement never holds a huge transaction.
SEED_CHUNK = 100_000
# A batch is one short transaction. A request that needs one of its rows waits at
# most that long: a fraction of DATABASE_LOCK_TIMEOUT_MS (5 s), and no stall a
# customer would notice, even on a busy 2-core machine.
LONGEST = Target("<=", 250)
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
        fields = ("prefix", "point", "status", "body", "at", "finished")
        for *batch, count in batches:
            named = dict(zip(fields, batch, strict=True))
            for start in range(1, count + 1, SEED_CHUNK):
                stop = min(count, start + SEED_CHUNK - 1)
                cursor.execute(_SEED_SQL, {**named, "user": user_id, "start": start, "stop": stop})
        # Fresh statistics: the planner must know the table is big (as it would be).
        cursor.execute("ANALYZE idempotency_idempotencykey")


def run(ctx: BenchContext) -> SuiteResult:
    return run_sized(ctx, expired=QUICK_EXPIRED if ctx.options.quick else EXPIRED)


def run_sized(ctx: BenchContext, *, expired: int) -> SuiteResult:
    from idempotency.models import IdempotencyKey, RecoveryPoint
    from idempotency.services import idempotency_key_reap

    seed(user_id=ctx.user_id, expired=expired)
    started = time.perf_counter()
    reaped = idempotency_key_reap()
    seconds = time.perf_counter() - started
    left = IdempotencyKey.objects.filter(user_id=ctx.user_id)
    fresh_kept = left.filter(key__startswith="fresh-").count()
    unfinished_kept = left.exclude(recovery_point=RecoveryPoint.FINISHED).count()
    if (reaped.deleted, fresh_kept, unfinished_kept) != (expired, FRESH, UNFINISHED):
        raise RuntimeError(f"the reaper deleted the wrong rows: {reaped}, {left.count()} left")
    specs: list[Figure] = [
        ("reaper_rows_per_s", f"rows/s, reaping {expired:,} expired records", "", None),
        ("reaper_longest_batch_ms", "longest single batch (transaction, lock held)", "ms", LONGEST),
        ("reaper_mean_batch_ms", "mean batch", "ms", None),
    ]
    values = {
        "reaper_rows_per_s": reaped.deleted / seconds,
        "reaper_longest_batch_ms": reaped.longest_batch_s * 1000,
        "reaper_mean_batch_ms": seconds * 1000 / reaped.batches,
    }
    notes = {
        "reaper_rows_per_s": f"{reaped.deleted:,} in {seconds:.1f} s",
        "reaper_mean_batch_ms": f"{reaped.batches:,} batches of up to 1,000 (the last one partial)",
    }
    kept = [
        ["expired (finished past the window)", f"{expired:,}", "0"],
        ["fresh (inside the window)", f"{FRESH:,}", f"{fresh_kept:,}"],
        ["unfinished, as old as the expired", f"{UNFINISHED:,}", f"{unfinished_kept:,}"],
    ]
    return SuiteResult(
        name=SUITE.name,
        title=SUITE.title,
        metrics=figures(specs, values, notes),
        sections=[Section("What the reaper kept", table(["records", "seeded", "left"], kept))],
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
