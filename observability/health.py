"""``/healthz`` (the process answers) and ``/readyz`` (its dependencies answer too).

Both are cheap, unauthenticated and leak nothing: a dependency is named with
a word ("unreachable"), never with its URL or its error text. The middleware
answers them before any other middleware runs (no host check, session, CSRF
or throttling), so a probe never depends on what a request normally needs.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse

from edge.errors import problem_response
from edge.redis import REDIS_DOWN, redis_client
from observability.errors import NotReady

logger = logging.getLogger(__name__)

OK = "ok"
UNREACHABLE = "unreachable"
MIGRATIONS_PENDING = "migrations pending"

# Once every migration is applied, it stays applied for this process's life (new
# migrations come with new code, i.e. a new process): checked until true, then
# only the connection is probed. The migration graph is read from disk: not cheap.
_migrated = False


def _database() -> str:
    global _migrated
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        if not _migrated:
            executor = MigrationExecutor(connection)
            _migrated = not executor.migration_plan(executor.loader.graph.leaf_nodes())
        return OK if _migrated else MIGRATIONS_PENDING
    except DatabaseError as error:
        logger.warning("readiness: database %s", type(error).__name__)
        return UNREACHABLE
    finally:
        # A probe outside the request cycle must not keep a broken connection around.
        connection.close_if_unusable_or_obsolete()


def _redis() -> str:
    try:
        redis_client().ping()
        return OK
    except REDIS_DOWN as error:
        logger.warning("readiness: redis %s", type(error).__name__)
        return UNREACHABLE


def readiness() -> dict[str, str]:
    """Each dependency -> "ok" or what is wrong with it."""
    return {"database": _database(), "redis": _redis()}


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": OK})


def readyz(request: HttpRequest) -> HttpResponse:
    checks = readiness()
    failed = [name for name, state in checks.items() if state != OK]
    if not failed:
        return JsonResponse({"status": OK, "checks": checks})
    detail = "Not ready: " + ", ".join(f"{name} {checks[name]}" for name in failed) + "."
    return problem_response(NotReady(detail, failed=failed, checks=checks))
