"""The naive variants' own small tables, created for one experiment and dropped after.

They live in the lab's database next to OnceShop's tables, never in OnceShop's
tables: a naive variant gets exactly the schema its mistake implies.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def scratch_table(name: str, ddl: str) -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {name}")
        cursor.execute(ddl)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {name}")


def count(sql: str, params: list[str | int] | None = None) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        row = cursor.fetchone()
    return int(row[0]) if row else 0
