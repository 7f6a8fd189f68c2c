"""4. A dedupe table that is never expired.

Every request adds a row; nothing ever removes one. The table (and its index,
and every lookup through it, and the backups) grows with the business for as
long as it runs. OnceShop keeps a finished key for IDEMPOTENCY_KEY_TTL (24 h),
then the reaper deletes it in small batches; unfinished keys are never reaped.

The month is simulated: each day's keys are written with that day's times, then
(for OnceShop) the real reaper runs as at the end of that day.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from idempotency.models import IdempotencyKey, RecoveryPoint
from idempotency.services import idempotency_key_reap
from tools.lab.context import Lab
from tools.lab.report import Finding
from tools.lab.tables import count, scratch_table

MISTAKE = "a dedupe table never expired"
NAIVE_TABLE = "lab_never_expired"
NAIVE_DDL = (
    f"CREATE TABLE {NAIVE_TABLE} (key text PRIMARY KEY, response text NOT NULL, "
    "created_at timestamptz NOT NULL)"
)
# A stored answer about the size of an order's JSON.
RESPONSE = "x" * 600


def _naive_day(day: int, start: datetime, per_day: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {NAIVE_TABLE} "  # noqa: S608 - our own table name
            "SELECT 'd' || %s || '-' || n, %s, %s + n * interval '1 second' "
            "FROM generate_series(1, %s) AS n",
            [day, RESPONSE, start + timedelta(days=day), per_day],
        )


def _onceshop_day(day: int, start: datetime, per_day: int, user_id: int) -> None:
    """One day of finished keys, written as the core writes them (spread over the day)."""
    table = IdempotencyKey._meta.db_table
    spacing = 86_400 / per_day
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (user_id, key, fingerprint, method, path, "  # noqa: S608
            "recovery_point, response_status, response_body, response_headers, "
            "resource_type, created_at, finished_at) "
            "SELECT %s, 'lab-d' || %s || '-' || n, repeat('f', 64), 'POST', "
            "'/api/v1/orders/', %s, 201, %s, '{}', 'order', t, t "
            "FROM generate_series(1, %s) AS n, "
            "LATERAL (SELECT %s + n * %s * interval '1 second' AS t) AS at",
            [
                user_id,
                day,
                RecoveryPoint.FINISHED,
                RESPONSE,
                per_day,
                start + timedelta(days=day),
                spacing,
            ],
        )


def run(lab: Lab) -> Finding:
    days, per_day = lab.scale.days, lab.scale.keys_per_day
    start = timezone.now() - timedelta(days=days + 1)
    user = lab.customer("reaper")
    naive_rows: dict[int, int] = {}
    our_rows: dict[int, int] = {}
    with scratch_table(NAIVE_TABLE, NAIVE_DDL):
        for day in range(days):
            _naive_day(day, start, per_day)
            _onceshop_day(day, start, per_day, user.pk)
            # The reaper's beat, at the end of the simulated day.
            idempotency_key_reap(now=start + timedelta(days=day + 1))
            naive_rows[day + 1] = count(f"SELECT count(*) FROM {NAIVE_TABLE}")  # noqa: S608
            our_rows[day + 1] = IdempotencyKey.objects.filter(user=user).count()
        naive_mb = count(f"SELECT pg_total_relation_size('{NAIVE_TABLE}')") / 1e6
    window_h = settings.IDEMPOTENCY_KEY_TTL / 3600
    return Finding(
        number=4,
        mistake=MISTAKE,
        naive=(
            f"{per_day:,} keys/day: {naive_rows[1]:,} rows on day 1, {naive_rows[days]:,} on "
            f"day {days} ({naive_mb:.1f} MB), and growing"
        ),
        onceshop=(
            f"reaper ({window_h:.0f} h window): {our_rows[1]:,} rows on day 1, "
            f"{our_rows[days]:,} on day {days}: flat"
        ),
        counts={
            "days": days,
            "naive_rows_end": naive_rows[days],
            "onceshop_rows_end": our_rows[days],
            "onceshop_rows_max": max(our_rows.values()),
        },
        # About one day's keys on every day (the window, plus the reaper's beat).
        holds={"the table stays flat": max(our_rows.values()) <= 2 * per_day},
    )
