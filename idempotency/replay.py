"""A replay answered from the stored bytes: one PostgreSQL and one Redis round trip.

Why this exists: a replay is what a retry storm sends after an outage, so it is
the answer the key layer gives most often when it matters most. Through DRF's
whole view (authentication, then the body's serializer, then the core's key
lookup) it cost two statements and the serializer's work before reaching the
one row it sends back. Here the API's token and the (user, key) record are read
in one statement (``sql.token_and_record_find``), DRF's permission and throttle
checks run as for any request (the throttle is its one Redis round trip: a
replay is still a request), and a finished record with this request's
fingerprint is answered there, before the view's handler, the serializer or the
core run. The packages that answer replays faster do it from a middleware,
before authentication, which is how they serve one user's answer to another:
here the record is found only through the caller's own credentials.

Anything that is not a finished replay (or a live lock's 409) goes on to the
view as before, so every other row of the behaviour matrix keeps its one path:
no record, another fingerprint (the body is validated first, then 422), a lock
free or stale (the retry takes it over), a request without a token (a session:
its record is read after DRF authenticated it, one statement more).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request

from edge.auth import TokenAuthentication
from edge.bounds import fits_column
from edge.errors import ApplicationError
from idempotency.core import Outcome, fingerprint, lock_remaining_s
from idempotency.errors import IdempotencyKeyInUse
from idempotency.header import HEADER, parse_idempotency_key
from idempotency.models import IdempotencyKey
from idempotency.sql import record_find, token_and_record_find

# Set on the Django request by ``ReplayTokenAuthentication``: the record found with
# the token, or None when the user has none under this key.
_FOUND = "idempotency_record"


class ReplayTokenAuthentication(TokenAuthentication):
    """The API's token authentication, reading the request's key record in the same query.

    Every check of DRF's class is kept (header syntax, unknown token, inactive
    user, the column bound of ``edge.auth``); only the SELECT is wider. A key
    header no record can hold is left to the view (400): the token is then read
    alone, as DRF reads it.
    """

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        self._request = request._request
        return super().authenticate(request)

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        if self._request.method in SAFE_METHODS:
            return super().authenticate_credentials(key)  # a read: no key, no record
        try:
            idempotency_key = parse_idempotency_key(self._request.headers.get(HEADER))
        except ApplicationError:  # missing or malformed: the view answers 400 after auth
            return super().authenticate_credentials(key)
        if not fits_column(type(self).get_model(self), "key", key):
            return super().authenticate_credentials(key)  # refused there, as unknown
        found = token_and_record_find(token_key=key, key=idempotency_key)
        if found is None or not found[0].user.is_active:
            return super().authenticate_credentials(key)  # DRF's own refusal, word for word
        token, record = found
        setattr(self._request, _FOUND, record)
        return token.user, token


def stored_record(request: Request, *, user_id: int, key: str) -> IdempotencyKey | None:
    """The caller's record under ``key``: as authentication found it, else one SELECT."""
    django_request: HttpRequest = request._request
    if hasattr(django_request, _FOUND):
        found: IdempotencyKey | None = getattr(django_request, _FOUND)
        return found
    record = record_find(user_id=user_id, key=key)
    setattr(django_request, _FOUND, record)
    return record


def read_once(request: Request) -> Callable[..., IdempotencyKey | None]:
    """The core's first look at the record (``core.execute``'s ``lookup``): the one this
    request has already read, moments ago, so a new key costs no second SELECT."""
    django_request: HttpRequest = request._request

    def lookup(*, user_id: int, key: str) -> IdempotencyKey | None:
        if hasattr(django_request, _FOUND):
            found: IdempotencyKey | None = getattr(django_request, _FOUND)
            delattr(django_request, _FOUND)  # once: a later look reads the database
            return found
        return record_find(user_id=user_id, key=key)

    return lookup


def replay_outcome(request: Request, record: IdempotencyKey, *, body: Any) -> Outcome | None:
    """The stored answer if this request (``body`` parsed) replays ``record``; None to go on.

    Raises 409 while a live request holds the record (as the core would, without
    its UPDATE: a lock younger than IDEMPOTENCY_LOCK_TIMEOUT cannot be taken).
    """
    if record.fingerprint != fingerprint(method=request.method or "", path=request.path, body=body):
        return None  # the view validates the body first, then the core answers 422
    if record.is_finished:
        return Outcome.of(record, replayed=True)
    now = timezone.now()
    stale_before = now - timedelta(seconds=settings.IDEMPOTENCY_LOCK_TIMEOUT)
    if record.locked_at is not None and record.locked_at >= stale_before:
        raise IdempotencyKeyInUse(retry_after=lock_remaining_s(record.locked_at, now=now))
    return None  # free or stale: the retry takes the lock over through the core
