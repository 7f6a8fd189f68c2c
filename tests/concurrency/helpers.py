"""Run many requests at once: real threads, each with its own database connection."""

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier
from typing import TypeVar

from django.db import connection, connections

T = TypeVar("T")


def run_at_once(count: int, call: Callable[[int], T]) -> list[T]:
    """Call ``call(i)`` for i in range(count) in ``count`` threads released together.

    Each thread opens its own connection (Django connections are per thread) and
    closes it in ``finally``. The caller's connection is closed first so the test
    never holds one more connection than the server allows.
    """
    connection.close()
    barrier = Barrier(count)

    def worker(index: int) -> T:
        try:
            barrier.wait()
            return call(index)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(worker, range(count)))
