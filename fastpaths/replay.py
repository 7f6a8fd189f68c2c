"""Agrees with ``IdempotentApi`` and ``idempotency.core.execute``: a replay, before the view.

Why this exists: a replay is what a retry storm sends after an outage, so it is
the answer the key layer gives most often when it matters most. Through DRF's
view it paid for the request wrapper, content negotiation, the authenticator,
permission and throttle objects, the body's parser and the view's checks, each
built for the general case, before sending one stored row. The packages that
answer faster do it from a middleware before authentication, which is how they
serve one user's answer to another. This middleware answers from the same
place, but finds the record only through the caller's own token: the token, its
user and the (user, key) record are one SELECT
(``fastpaths.records.token_and_record_find``), and the throttle is its one Redis
round trip (a replay is still a request). The shipped settings put it last in
MIDDLEWARE.

The reference it must agree with is the normal path: ``IdempotentApi.initial``
(authentication, permissions, throttles, method, path, key header), then the
view's handler and ``core.execute``, which replays a finished record with the
same fingerprint. ``tests/fastpaths/test_replay.py`` sends the behaviour
matrix's rows through both and compares the answers byte for byte.

It answers only a finished record with this request's fingerprint, and only
when every check passes as DRF would pass it; it refuses nothing itself. Anything
else goes on to the view, which answers it through DRF: no token (a session), a
header DRF would refuse, an ``Accept`` or ``Content-Type`` other than plain
JSON, a permission or throttle class that is not the project's own, a
permission refused, a throttle's refusal (counted here once: DRF's check then
reads that count, ``edge.throttling``), an unknown token or inactive user, a
database error on the read (the view's own read meets it and answers it), a
record unfinished (409 or a takeover) or with another fingerprint (the body is
validated first, then 422). What it read goes on with it: the token
authenticates without a second SELECT (``fastpaths/auth.py``) and the record
store's first look takes the record (``fastpaths/records.py``), so a new key
costs no statement more. It answers nothing with the key layer switched off
(``IDEMPOTENCY_ENABLED`` false), nor for a token authentication other than
``fastpaths.auth.ReadTokenAuthentication``.

It is the last middleware: every other one has run on the way in and runs on the
way out, for a replay as for a first answer, and DRF's own ``finalize_response``
adds the view's headers (``Allow``), so the two answers carry the same headers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from rest_framework import HTTP_HEADER_ENCODING
from rest_framework.permissions import SAFE_METHODS, IsAuthenticated
from rest_framework.request import Request
from rest_framework.settings import api_settings

from edge.bounds import fits_column
from edge.errors import ApplicationError
from edge.strictjson import StrictJSONParser, loads
from edge.throttling import UserRateThrottle
from fastpaths import records
from fastpaths.auth import ReadTokenAuthentication, TokenRead, remember
from fastpaths.records import token_and_record_find
from idempotency.core import Outcome, fingerprint
from idempotency.drf import (
    HEADER,
    IdempotentApi,
    parse_idempotency_key,
    route_of,
    stored_response,
)
from idempotency.models import IdempotencyKey
from observability import context, tracking

# What DRF's negotiation would answer with JSON for, and never with 406.
_JSON_ACCEPTED = frozenset({None, "*/*", "application/json"})


class ReplayMiddleware:
    """Answer a token request's replay from its record; let everything else through."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        try:
            return self.get_response(request)
        finally:
            records.forget()  # a read the view never looked at stays with its request

    def process_view(
        self, request: HttpRequest, view_func: Any, view_args: Any, view_kwargs: Any
    ) -> HttpResponseBase | None:
        view_class = getattr(view_func, "cls", None)  # DRF's as_view() names its class
        if not (isinstance(view_class, type) and issubclass(view_class, IdempotentApi)):
            return None
        if not settings.IDEMPOTENCY_ENABLED or request.method in SAFE_METHODS:
            return None
        view = view_class(**view_func.initkwargs)
        view.setup(request, *view_args, **view_kwargs)  # as as_view() does (HEAD from GET)
        read = _token_read(request, view)
        if read is None:
            return None
        # For the view, should it go on there: its authentication and its first look.
        remember(request, read)
        if read.token is not None:
            records.hand_over(user_id=read.token.user_id, key=read.key, record=read.record)
        if read.token is None or read.record is None or not read.record.is_finished:
            return None
        return _replayed(request, view, read)


def _token_read(request: HttpRequest, view: IdempotentApi) -> TokenRead | None:
    """The presented token and its user's record, read together; None when the view's
    own checks would refuse the request before authentication finds either."""
    method = (request.method or "").lower()
    if method not in view.http_method_names or not hasattr(view, method):
        return None  # 405, from the view
    if not fits_column(IdempotencyKey, "path", request.path):
        return None  # 404, from the view
    try:
        key = parse_idempotency_key(request.headers.get(HEADER))
    except ApplicationError:
        return None  # 400 after authentication, from the view
    token_key = _presented_token(request, view)
    if token_key is None:
        return None
    try:
        found = token_and_record_find(token_key=token_key, key=key)
    except DatabaseError:
        return None  # the view meets it again, and answers it (503 for a session lost)
    token, record = found if found is not None else (None, None)
    return TokenRead(token_key=token_key, key=key, token=token, record=record)


def _presented_token(request: HttpRequest, view: IdempotentApi) -> str | None:
    """The token DRF's first authenticator would look up, if it is the API's token one
    and the header is one it accepts (any other header: DRF refuses it or tries the
    next authenticator, and the view says which)."""
    authenticators = view.get_authenticators()
    if not authenticators or type(authenticators[0]) is not ReadTokenAuthentication:
        return None
    words = request.META.get("HTTP_AUTHORIZATION", "").encode(HTTP_HEADER_ENCODING).split()
    if len(words) != 2 or words[0].lower() != authenticators[0].keyword.lower().encode():
        return None
    try:
        token_key = words[1].decode()
    except UnicodeError:
        return None
    return token_key if fits_column(authenticators[0].get_model(), "key", token_key) else None


def _replayed(request: HttpRequest, view: IdempotentApi, read: TokenRead) -> HttpResponse | None:
    """The stored answer, if this request replays the record and passes DRF's checks."""
    record, token = read.record, read.token
    assert record is not None
    assert token is not None
    throttles = _project_throttles(view)
    if throttles is None or not token.user.is_active or not _negotiates_json(request, view):
        return None
    try:
        body = loads(request.body)
    except ApplicationError:
        return None  # 400, from the view's parser
    if record.fingerprint != fingerprint(method=request.method or "", path=request.path, body=body):
        return None  # the view validates the body first, then the core answers 422
    request.user = token.user  # as DRF's authentication sets it on the Django request
    if not all(throttle.allow_request(request, view) for throttle in throttles):
        return None  # counted: the view's own check reads the count and answers 429
    context.bind(user_id=token.user_id, key_hash=context.key_hash(read.key))
    with tracking.idempotent_request(route=route_of(request)) as done:
        done(True)
    view.headers = view.default_response_headers  # what APIView.dispatch sets
    # (For a plain HttpResponse, finalize_response reads nothing of the request but its
    # method: the Django request stands in for DRF's.)
    response: HttpResponse = view.finalize_response(
        cast(Request, request), stored_response(Outcome.of(record, replayed=True))
    )
    return response


def _negotiates_json(request: HttpRequest, view: IdempotentApi) -> bool:
    """DRF's negotiation would pick the JSON parser for the body and answer in JSON."""
    if request.GET.get(api_settings.URL_FORMAT_OVERRIDE or "format") is not None:
        return False
    if request.META.get("HTTP_ACCEPT") not in _JSON_ACCEPTED:
        return False
    content_type = request.META.get("CONTENT_TYPE", "").split(";", 1)[0].strip()
    parsers = view.parser_classes
    return content_type == "application/json" and bool(parsers) and parsers[0] is StrictJSONParser


def _project_throttles(view: IdempotentApi) -> list[UserRateThrottle] | None:
    """The view's throttles, if its permissions and throttles are the ones this path
    knows how to run: an authenticated user is all ``IsAuthenticated`` asks, and the
    project's throttles key on the user alone. None for any other."""
    if not all(cls is IsAuthenticated for cls in view.permission_classes):
        return None
    throttles = view.get_throttles()
    if not all(isinstance(throttle, UserRateThrottle) for throttle in throttles):
        return None
    return cast(list[UserRateThrottle], throttles)
