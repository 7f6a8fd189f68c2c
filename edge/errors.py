"""Errors as RFC 9457 problem+json, with a stable ``code`` clients can switch on.

Domain errors are ``ApplicationError`` subclasses (one class per code, declared
next to the domain that raises them); the edge's own are here, with the problem
shape. Every error the API returns goes through ``edge.handler.exception_handler``,
which maps framework and database errors onto these.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse, JsonResponse
from django.utils.translation import gettext_noop

PROBLEM_CONTENT_TYPE = "application/problem+json"
# The header a retry sends again (idempotency/drf.py reads it; spelled here too, since
# this module sits below the idempotency layer).
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"


class ApplicationError(Exception):
    """Base of every error the API answers with on purpose.

    ``final`` says whether the error is the request's final answer once the action
    has started: final errors (out of stock, declined, not payable) are stored on
    the idempotency record and replayed; non-final ones (bad input, an unknown
    provider outcome) are not, so a retry runs again.
    """

    status: int = 400
    code: str = "bad-request"
    title: str = gettext_noop("Bad request")
    default_detail: str = "The request could not be processed."
    final: bool = False

    def __init__(self, detail: str | None = None, **extra: Any) -> None:
        self.detail = detail or self.default_detail
        self.extra = extra
        self.headers: dict[str, str] = {}
        super().__init__(self.detail)

    def to_problem(self) -> dict[str, Any]:
        return problem(
            status=self.status, code=self.code, title=self.title, detail=self.detail, **self.extra
        )


class ValidationFailed(ApplicationError):
    """The body or a parameter is not acceptable; nothing was attempted."""

    code = "validation-error"
    title = gettext_noop("Invalid request")
    default_detail = "The request body is not valid."


class PayloadTooLarge(ApplicationError):
    """The body is larger than ``API_MAX_BODY_BYTES``."""

    status = 413
    code = "payload-too-large"
    title = gettext_noop("Payload too large")
    default_detail = "The request body is larger than the server accepts."


class TooManyRequests(ApplicationError):
    """A rate limit or quota was reached; nothing was done. ``Retry-After`` says when."""

    status = 429
    code = "throttled"
    title = gettext_noop("Too many requests")
    default_detail = "Too many requests; retry after the Retry-After."

    def __init__(self, detail: str | None = None, *, retry_after: float, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.headers["Retry-After"] = str(int(retry_after) + 1)


class LengthRequired(ApplicationError):
    """A body framed without ``Content-Length`` that the server cannot tell the end of."""

    status = 411
    code = "length-required"
    title = gettext_noop("Length required")
    default_detail = "Send the request body with a Content-Length header."


class UriTooLong(ApplicationError):
    """The request's path and query are longer than the shop reads (4,094 characters)."""

    status = 414
    code = "uri-too-long"
    title = gettext_noop("URI too long")
    default_detail = "The request's path and query are too long; send large inputs in a body."


class HeaderFieldsTooLarge(ApplicationError):
    """A header field is longer than the shop reads, or a request has too many of them."""

    status = 431
    code = "header-fields-too-large"
    title = gettext_noop("Request header fields too large")
    default_detail = "A header field is too long, or there are too many header fields."


class LockTimeout(ApplicationError):
    """A row lock was not granted within ``DATABASE_LOCK_TIMEOUT_MS``; safe to retry."""

    status = 503
    code = "lock-timeout"
    title = gettext_noop("Busy, try again")
    default_detail = "The resource is busy; retry with the same Idempotency-Key."

    def __init__(self, detail: str | None = None, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.headers["Retry-After"] = "1"


class ServiceUnavailable(ApplicationError):
    """A service the action cannot do without (Redis, for the checkout's one-time
    tokens) does not answer. Nothing was attempted; try again after ``Retry-After``."""

    status = 503
    code = "service-unavailable"
    title = gettext_noop("Service unavailable")
    default_detail = "A service this action needs does not answer; retry after the Retry-After."
    # A restarted Redis is back within seconds (its append-only file is short).
    retry_after_s = 5

    def __init__(self, detail: str | None = None, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.headers["Retry-After"] = str(self.retry_after_s)


class DatabaseSessionLost(ServiceUnavailable):
    """The database ended this request's session (a restart, a failover, an operator's
    ``pg_terminate_backend``) or the connection broke mid-request. What the request had
    not committed is rolled back with the session; the retry gets a new one."""

    default_detail = (
        "The database connection was lost during the request; retry after the Retry-After "
        "(with the same Idempotency-Key, if the request had one)."
    )
    # A new session is one connect away: the retry need hardly wait.
    retry_after_s = 1


class ConcurrentUpdate(ApplicationError):
    """PostgreSQL aborted the transaction (serialization failure or deadlock); nothing changed."""

    status = 409
    code = "concurrent-update"
    title = gettext_noop("Concurrent update")
    default_detail = "A concurrent request changed the same data; retry with the same key."

    def __init__(self, detail: str | None = None, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.headers["Retry-After"] = "1"


class InternalError(ApplicationError):
    """Anything unexpected. The phase that raised it was rolled back."""

    status = 500
    code = "internal-error"
    title = gettext_noop("Internal error")
    default_detail = "Something went wrong on the server; try again later."
    # Only a request that carried a key can be resumed by sending it again with that
    # key; a GET (or a POST without a key) is told nothing about keys.
    keyed_detail = "Something went wrong; retry with the same Idempotency-Key."


def problem(*, status: int, code: str, title: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": f"/problems/{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }


def problem_response(error: ApplicationError) -> HttpResponse:
    """A plain Django response, for code that runs outside DRF (middleware, URL handlers)."""
    response = JsonResponse(
        error.to_problem(), status=error.status, content_type=PROBLEM_CONTENT_TYPE
    )
    for name, value in error.headers.items():
        response[name] = value
    return response
