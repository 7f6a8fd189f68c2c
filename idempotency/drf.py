"""The thin DRF integration of the idempotency core.

An unsafe endpoint subclasses ``IdempotentApi`` and ends its handler with
``return self.idempotent(request, flow)``. The order of checks is the
behaviour matrix of docs/design.md:

1. authentication, permissions, throttling (DRF's ``initial``): 401/403/429,
   never stored;
2. a method the endpoint does not have: 405 (no key makes PUT work), and a path
   no record can hold (a NUL from ``%00``): 404, it names nothing;
3. the Idempotency-Key header: 400 missing / invalid, never stored;
4. the body, by the view's serializer: 400 ``validation-error``, never stored;
5. the core: replay, 409 in flight, 422 mismatch, or run the flow.

A token request's replay is answered before all of this, by the fast path in
``idempotency/replay.py`` (the same checks, the same bytes); whatever it does
not answer comes here with what it read: the token authenticates without a
second SELECT (``ReadTokenAuthentication``) and the core's first look reuses the
record (``read_once``).

``IDEMPOTENCY_ENABLED=false`` (benchmarks, the test that the other layers hold
alone) is read by this integration only (here, and by the fast path, which then
answers nothing): the flow runs without the core (``idempotency/unkeyed.py``),
and nothing is looked up or replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.authentication import BaseAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import MethodNotAllowed, NotFound
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.views import APIView

from edge.api import current_user_id
from edge.auth import TokenAuthentication
from edge.bounds import fits_column
from edge.errors import PROBLEM_CONTENT_TYPE
from edge.openapi import ProblemSerializer
from idempotency.core import KeyRequest, Lookup, Outcome, execute
from idempotency.header import HEADER, HEADER_PATTERN, parse_idempotency_key
from idempotency.models import IdempotencyKey
from idempotency.sql import record_find
from idempotency.unkeyed import run_unkeyed
from observability import context, tracking

JSON_CONTENT_TYPE = "application/json"
REPLAYED_HEADER = "Idempotent-Replayed"


@dataclass(frozen=True)
class TokenRead:
    """What the replay's fast path read before the view: the token presented (None: no
    such token) with its user, and that user's record under the request's key."""

    token_key: str
    key: str
    token: Token | None
    record: IdempotencyKey | None


# The attribute of the Django request that holds it (DRF's Request reads it through).
FAST_PATH_READ = "idempotency_fast_path_read"


class ReadTokenAuthentication(TokenAuthentication):
    """The API's token authentication, reusing the token the fast path read.

    Every check of DRF's class is kept (header syntax, unknown token, inactive
    user, the column bound of ``edge.auth``); only the SELECT is saved. Anything
    else (nothing read, another token, a token unknown or its user inactive) goes
    to DRF's own query and its own refusal, word for word.
    """

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        self._read: TokenRead | None = getattr(request._request, FAST_PATH_READ, None)
        return super().authenticate(request)

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        read = self._read
        if read is None or read.token_key != key or read.token is None:
            return super().authenticate_credentials(key)
        if not read.token.user.is_active:
            return super().authenticate_credentials(key)  # DRF's refusal, in its words
        return read.token.user, read.token


def read_once(request: Request) -> Lookup:
    """The core's first look at the record (``core.execute``'s ``lookup``): the one the
    fast path read moments ago with the caller's token, so a new key costs no second
    SELECT. Any later look, or one for another user or key, reads the database."""
    read = getattr(request._request, FAST_PATH_READ, None)
    unused = [] if read is None or read.token is None else [(read.token.user_id, read.key)]

    def lookup(*, user_id: int, key: str) -> IdempotencyKey | None:
        if unused and unused.pop() == (user_id, key):
            assert read is not None
            return read.record
        return record_find(user_id=user_id, key=key)

    return lookup


class IdempotentApi(APIView):
    """Base class of the endpoints that create or move money or stock."""

    idempotency_key: str

    def get_authenticators(self) -> list[BaseAuthentication]:
        authenticators = super().get_authenticators()
        # (The schema generator's fake view documents DRF's token scheme, which this is.)
        if getattr(self, "swagger_fake_view", False):
            return authenticators
        # The token the fast path read with the request's key record, not read again.
        return [
            ReadTokenAuthentication() if type(a) is TokenAuthentication else a
            for a in authenticators
        ]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if request.method in SAFE_METHODS:  # reads on the same URL need no key
            return
        method = (request.method or "").lower()
        if method not in self.http_method_names or not hasattr(self, method):
            # DRF would answer 405 only after this method returns: too late, the key
            # check below would have answered 400 for a request no key can fix.
            raise MethodNotAllowed(method.upper())
        if not fits_column(IdempotencyKey, "path", request.path):
            raise NotFound()  # the record stores the path; one it cannot hold names nothing
        self.idempotency_key = parse_idempotency_key(request.headers.get(HEADER))
        # The logs name the key by its hash only (never the key itself).
        context.bind(user_id=request.user.pk, key_hash=context.key_hash(self.idempotency_key))

    def idempotent(self, request: Request, flow: Callable[[IdempotencyKey], None]) -> HttpResponse:
        """Run ``flow`` under the request's key, or replay what it answered before."""
        key_request = KeyRequest(
            user_id=current_user_id(request),
            key=self.idempotency_key,
            method=request.method or "POST",
            path=request.path,
            body=request.data,
        )
        # The layer's one switch, where it is plugged in: off (a benchmark, the test of
        # the other layers) the flow runs without the core (idempotency/unkeyed.py).
        with tracking.idempotent_request(route=route_of(request)) as done:
            if settings.IDEMPOTENCY_ENABLED:
                outcome = execute(key_request, flow, lookup=read_once(request))
            else:
                outcome = run_unkeyed(key_request, flow)
            done(outcome.replayed)
        return stored_response(outcome)

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        # Any answer to an unsafe request that is not a replay (errors included) is fresh.
        if request.method not in SAFE_METHODS and REPLAYED_HEADER not in response:
            response[REPLAYED_HEADER] = "false"
        return response


def route_of(request: HttpRequest | Request) -> str:
    """The metrics' name of the request's endpoint."""
    return request.resolver_match.view_name if request.resolver_match else "unmatched"


def stored_response(outcome: Outcome) -> HttpResponse:
    """The answer a key's record holds, fresh or replayed: the one way it is sent."""
    # The stored text as it is: the JSON was encoded once, when it was stored, and
    # a replay sends the same bytes as the first answer.
    response = HttpResponse(
        outcome.body_text.encode(),
        status=outcome.status,
        headers=outcome.headers,
        content_type=PROBLEM_CONTENT_TYPE if outcome.status >= 400 else JSON_CONTENT_TYPE,
    )
    response[REPLAYED_HEADER] = "true" if outcome.replayed else "false"
    return response


# --- OpenAPI ------------------------------------------------------------------------

IDEMPOTENCY_KEY_PARAMETER = OpenApiParameter(
    name=HEADER,
    type={"type": "string", "pattern": HEADER_PATTERN, "minLength": 1, "maxLength": 257},
    location=OpenApiParameter.HEADER,
    required=True,
    description=(
        "Client-generated, high-entropy key (a UUID v4 is ideal), 1-255 characters from "
        "`A-Z a-z 0-9 - _ . : ~`, bare or as an sf-string. Scoped per user. Reuse it for "
        "every retry of the same request; use a new one for a new request. Finished keys "
        "are kept for IDEMPOTENCY_KEY_TTL seconds (24 h by default)."
    ),
)

_IDEMPOTENCY_ERRORS = {
    400: OpenApiResponse(
        ProblemSerializer,
        description=(
            "`idempotency-key-missing`, `idempotency-key-invalid`, `validation-error`, "
            "`malformed-json`, `json-too-deep` or `json-number-not-finite`: not stored, fix "
            "the request"
        ),
    ),
    409: OpenApiResponse(
        ProblemSerializer,
        description=(
            "`idempotency-key-in-use`: the first request with this key is still running; "
            "retry after `Retry-After` seconds with the same key"
        ),
    ),
    413: OpenApiResponse(ProblemSerializer, description="`payload-too-large`"),
    422: OpenApiResponse(
        ProblemSerializer,
        description=("`idempotency-key-mismatch`: the key was used for a different request"),
    ),
}


def idempotent_schema(*, responses: dict[int, Any], **kwargs: Any) -> Callable[[Any], Any]:
    """``extend_schema`` with the Idempotency-Key header and the layer's answers."""
    merged: dict[int, Any] = {**_IDEMPOTENCY_ERRORS, **responses}
    return extend_schema(parameters=[IDEMPOTENCY_KEY_PARAMETER], responses=merged, **kwargs)
