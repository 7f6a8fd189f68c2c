"""What the bench database's sessions are doing while a scenario runs.

A profile shows one request alone; under 16 concurrent clients the question is
also whether requests queue in PostgreSQL. A background thread samples
``pg_stat_activity`` of the bench database every 50 ms and keeps the mean
number of sessions in each state:

* **running**: executing a statement (on CPU, or waiting on I/O);
* **lock wait**: blocked on a lock another transaction holds (a hot row);
* **idle in transaction**: a transaction is open and PostgreSQL is waiting for
  the application's next statement, i.e. the app holds its locks while Python runs;
* **idle**: connected, no transaction.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import psycopg

from bench.database import libpq_uri

INTERVAL_S = 0.05
STATES = ("running", "lock wait", "idle in transaction", "idle")

_QUERY = """
    SELECT state, wait_event_type FROM pg_stat_activity
    WHERE datname = current_database() AND backend_type = 'client backend'
      AND pid <> pg_backend_pid()
"""


def classify(state: str | None, wait_event_type: str | None) -> str:
    """One of STATES for a pg_stat_activity row."""
    if state == "active":
        return "lock wait" if wait_event_type == "Lock" else "running"
    if state in ("idle in transaction", "idle in transaction (aborted)"):
        return "idle in transaction"
    return "idle"


def mean_counts(snapshots: Iterable[Iterable[tuple[str | None, str | None]]]) -> dict[str, float]:
    """Mean number of sessions per state over the snapshots taken."""
    totals: Counter[str] = Counter()
    taken = 0
    for rows in snapshots:
        taken += 1
        totals.update(classify(state, wait) for state, wait in rows)
    return {state: totals[state] / taken if taken else 0.0 for state in STATES}


class SessionSampler(threading.Thread):
    """Snapshots of the bench database's sessions, every INTERVAL_S until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(name="bench-pg-sessions", daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.snapshots: list[list[tuple[str | None, str | None]]] = []

    def run(self) -> None:
        with psycopg.connect(libpq_uri(self.url), autocommit=True) as conn:
            while not self.stop.wait(INTERVAL_S):
                self.snapshots.append(conn.execute(_QUERY).fetchall())

    def means(self) -> dict[str, float]:
        return mean_counts(self.snapshots)


@contextmanager
def watch(url: str) -> Iterator[SessionSampler]:
    """Sample the sessions while the block runs; read ``.means()`` afterwards."""
    sampler = SessionSampler(url)
    sampler.start()
    try:
        yield sampler
    finally:
        sampler.stop.set()
        sampler.join(timeout=5)
