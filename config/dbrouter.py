"""Which database a query goes to: the primary, unless a stale answer is allowed.

With ``DATABASE_REPLICA_URL`` set, ``DATABASES`` has a ``replica`` alias: a
streaming replica (hot standby) of the primary. A replica lags: a row committed
on the primary a moment ago may not be there yet. So the rule is opt-in and
narrow: only code inside ``stale_reads()`` (the read-only list and report pages,
marked with ``allow_stale_reads``) reads the replica. Everything else reads the
primary: the write path, every Idempotency-Key lookup and every replay. A replay
read from a lagging replica would find no record for a key the primary already
holds, and would run the request a second time (docs/scaling.md).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections

REPLICA = "replica"
logger = logging.getLogger(__name__)

# A context variable, not a thread-local: right under gthread workers and in async
# code alike; each request starts with the default (the primary).
_stale_allowed: ContextVar[bool] = ContextVar("stale_reads_allowed", default=False)

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def stale_reads() -> Iterator[None]:
    """Reads inside may come from the replica (if there is one) and be seconds old."""
    token = _stale_allowed.set(True)
    try:
        yield
    finally:
        _stale_allowed.reset(token)


def allow_stale_reads(view: F) -> F:
    """Mark a read-only view whose answer may lag the primary by the replica's delay."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with stale_reads():
                return view(*args, **kwargs)
        except (OperationalError, InterfaceError):
            if REPLICA not in settings.DATABASES:
                raise
            # The replica is down or restarting: the same read on the primary.
            logger.warning("replica unavailable; stale read served by the primary")
            connections[REPLICA].close()
            return view(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class PrimaryReplicaRouter:
    """Reads go to the replica only inside ``stale_reads()``; writes always to the primary."""

    def db_for_read(self, model: type, **hints: Any) -> str | None:
        if not _stale_allowed.get() or REPLICA not in settings.DATABASES:
            return None
        # Inside a transaction on the primary a read must see that transaction's own
        # writes (and its locks): a stale page that happens to open one stays there.
        if connections[DEFAULT_DB_ALIAS].in_atomic_block:
            return None
        return REPLICA

    def db_for_write(self, model: type, **hints: Any) -> str | None:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        # The replica holds the same rows as the primary: a relation between an object
        # read from one and an object read from the other is the same relation.
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        # A hot standby is read-only; it receives the schema through replication.
        return db == DEFAULT_DB_ALIAS
