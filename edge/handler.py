"""Any exception, mapped to the problem+json the client sees.

DRF's EXCEPTION_HANDLER (``exception_handler``) and every answer written outside
DRF (middleware, URL handlers, the demo's pages) go through ``as_application_error``:
an ``ApplicationError`` is itself, framework and database errors get their codes
(edge/errors.py), and anything unknown is a 500 ``internal-error`` with the
traceback in the log, never a page.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.db import InternalError as DatabaseInternalError
from django.http import Http404
from psycopg import errors as pg_errors
from rest_framework import exceptions as drf
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from edge.errors import (
    IDEMPOTENCY_KEY_HEADER,
    PROBLEM_CONTENT_TYPE,
    ApplicationError,
    ConcurrentUpdate,
    DatabaseSessionLost,
    InternalError,
    LockTimeout,
    PayloadTooLarge,
    ValidationFailed,
)

logger = logging.getLogger(__name__)


# DRF's own exceptions, mapped to our codes. Order matters: subclasses first.
_DRF_CODES: list[tuple[type[drf.APIException], str]] = [
    (drf.ParseError, "malformed-json"),
    (drf.NotAuthenticated, "not-authenticated"),
    (drf.AuthenticationFailed, "not-authenticated"),
    (drf.PermissionDenied, "permission-denied"),
    (drf.NotFound, "not-found"),
    (drf.MethodNotAllowed, "method-not-allowed"),
    (drf.NotAcceptable, "not-acceptable"),
    (drf.UnsupportedMediaType, "unsupported-media-type"),
    (drf.Throttled, "throttled"),
]


def _from_drf(exc: drf.APIException) -> ApplicationError:
    if isinstance(exc, drf.ValidationError):
        return ValidationFailed(errors=exc.detail)
    code = next((code for cls, code in _DRF_CODES if isinstance(exc, cls)), "bad-request")
    error = ApplicationError(str(exc.detail))
    # A one-off error for a framework exception: our shape, the framework's status.
    error.status = exc.status_code
    error.code = code
    error.title = code.replace("-", " ").capitalize()
    if auth_header := getattr(exc, "auth_header", None):
        error.headers["WWW-Authenticate"] = auth_header
    if isinstance(exc, drf.Throttled) and (wait := getattr(exc, "wait", None)) is not None:
        error.headers["Retry-After"] = str(int(wait) + 1)
    return error


# The server ended the session (57P01-57P03): nothing more can be done on it.
_SESSION_ENDED = (pg_errors.AdminShutdown, pg_errors.CrashShutdown, pg_errors.CannotConnectNow)
# SQLSTATE class 08, connection exceptions: the connection under the session broke.
# Through PgBouncer this is how a server session lost under a client reaches it when
# the pooler saw the break before the server's own goodbye: 08P01 "server conn
# crashed?", and the client's connection is closed after it.
_CONNECTION_EXCEPTION_CLASS = "08"


def _session_lost(exc: BaseException) -> bool:
    """Whether ``exc``, or what it was raised in handling, is a lost database session:
    ended by the server, or a broken connection (psycopg's error with no SQLSTATE, or
    "the connection is closed" when the request tried to go on).

    Through PgBouncer, a server session ended under a client can also surface as a
    protocol mix-up on the client's next command ("received 2 results from command
    'BEGIN'": the pooler relays the ended session's error with the new answer).
    psycopg raises that as an InternalError without a SQLSTATE; the session is as
    lost, and what it had not committed is rolled back with it. So is any connection
    exception (SQLSTATE class 08)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (*_SESSION_ENDED, psycopg.InterfaceError)):
            return True
        if isinstance(seen, psycopg.OperationalError | psycopg.InternalError) and (
            seen.sqlstate is None
        ):
            return True
        if isinstance(seen, psycopg.Error) and (seen.sqlstate or "").startswith(
            _CONNECTION_EXCEPTION_CLASS
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _from_database(
    exc: OperationalError | InterfaceError | DatabaseInternalError,
) -> ApplicationError | None:
    if _session_lost(exc):
        return DatabaseSessionLost()
    cause = exc.__cause__
    if isinstance(cause, pg_errors.LockNotAvailable):
        return LockTimeout()
    if isinstance(cause, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
        return ConcurrentUpdate()
    return None


def as_application_error(exc: Exception, *, keyed: bool = False) -> ApplicationError:
    """Map any exception to the error the client sees (``keyed``: the request carried
    an Idempotency-Key, which a 500's detail then tells the client to send again)."""
    if isinstance(exc, ApplicationError):
        return exc
    if isinstance(exc, Http404):
        return _from_drf(drf.NotFound())
    if isinstance(exc, DjangoPermissionDenied):
        return _from_drf(drf.PermissionDenied())
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge()
    if isinstance(exc, drf.APIException):
        return _from_drf(exc)
    database_error = OperationalError | InterfaceError | DatabaseInternalError
    if isinstance(exc, database_error) and (mapped := _from_database(exc)):
        return mapped
    logger.exception("unhandled error", exc_info=exc)
    return InternalError(InternalError.keyed_detail if keyed else None)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's EXCEPTION_HANDLER: every API error leaves as problem+json."""
    request = context.get("request")
    # A key on a GET is ignored by the layer, so it is no reason to advise one either.
    keyed = (
        request is not None
        and request.method not in ("GET", "HEAD", "OPTIONS")
        and bool(request.headers.get(IDEMPOTENCY_KEY_HEADER))
    )
    error = as_application_error(exc, keyed=keyed)
    if request is not None:
        # Whatever the view renders (the schema's YAML, Swagger's HTML), its errors are JSON.
        request.accepted_renderer = JSONRenderer()
        request.accepted_media_type = PROBLEM_CONTENT_TYPE
    return Response(
        error.to_problem(),
        status=error.status,
        headers=error.headers,
        content_type=PROBLEM_CONTENT_TYPE,
    )
