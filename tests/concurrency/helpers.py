"""Run many requests at once: real threads, each with its own database connection."""

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier, Thread
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


def race(*works: Callable[[], object]) -> list[BaseException]:
    """Run each of ``works`` in its own thread (and connection), released together;
    what they raised. The jobs' own results are in the database."""
    barrier = Barrier(len(works))
    errors: list[BaseException] = []

    def racer(work: Callable[[], object]) -> None:
        try:
            barrier.wait()
            work()
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [Thread(target=racer, args=(work,)) for work in works]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def backend_pid() -> int:
    """This thread's PostgreSQL backend (opens the thread's connection if needed)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def wait_until_waiting_on_a_lock(pid: int, *, timeout_s: float = 10) -> None:
    """Return once PostgreSQL reports backend ``pid`` waiting on a lock.

    Asked of pg_stat_activity, the server's own account of what ``pid`` waits
    on: the race it sets up is certain, not hoped for after a sleep.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
            row = cursor.fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.005)
    raise AssertionError(f"backend {pid} never waited on a lock")
