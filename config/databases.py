"""``DATABASES`` from the environment: the primary, its replica, and a pooler's needs.

Two settings change the shape (docs/configuration.md, docs/scaling.md):

- ``DATABASE_REPLICA_URL``: a streaming replica of the primary. It becomes the
  ``replica`` alias, which only the reads config/dbrouter.py allows to be stale
  ever reach.
- ``DATABASE_TRANSACTION_POOLING``: true when a pooler in transaction mode
  (PgBouncer's ``pool_mode = transaction``) stands between us and PostgreSQL.
  Consecutive transactions of one Django connection then run on different server
  connections, so nothing may outlive a transaction:

  - no ``-c lock_timeout`` startup option: PgBouncer refuses a client that sends
    ``options`` ("unsupported startup parameter"), and a session setting would
    stay on whichever server connection ran it. The lock timeout is set on the
    server instead (``ALTER ROLE ... SET lock_timeout``, what ``make cluster``
    does), so every server connection the pooler opens starts with it;
  - no server-side cursors: ``.iterator()`` would DECLARE a cursor in one
    transaction and FETCH it in another, on a server connection that never
    heard of it;
  - no prepared statements: psycopg prepares a query it has run five times
    (``prepare_threshold``) on the server connection it happened to get, and
    the sixth run lands on another one.

  Advisory locks need nothing: the code takes only ``pg_advisory_xact_lock``,
  which ends with its transaction.
"""

from __future__ import annotations

from typing import Any

import dj_database_url

from config.dbrouter import REPLICA


def databases(
    *,
    url: str,
    replica_url: str,
    conn_max_age: int,
    lock_timeout_ms: int,
    transaction_pooling: bool,
) -> dict[str, dict[str, Any]]:
    aliases = {"default": url, **({REPLICA: replica_url} if replica_url else {})}
    result: dict[str, dict[str, Any]] = {}
    for alias, alias_url in aliases.items():
        entry: dict[str, Any] = dict(
            dj_database_url.parse(alias_url, conn_max_age=conn_max_age, conn_health_checks=True)
        )
        options = entry.setdefault("OPTIONS", {})
        if transaction_pooling:
            options["prepare_threshold"] = None
            entry["DISABLE_SERVER_SIDE_CURSORS"] = True
        else:
            options["options"] = f"-c lock_timeout={lock_timeout_ms}"
        # Never on: the idempotency layer owns its transactions (one per phase).
        entry["ATOMIC_REQUESTS"] = False
        result[alias] = entry
    if REPLICA in result:
        # Tests: the replica's test database is the primary's, replicated (only its
        # NAME is taken from the primary; it keeps its own host and port).
        result[REPLICA]["TEST"] = {"MIRROR": "default"}
    return result
