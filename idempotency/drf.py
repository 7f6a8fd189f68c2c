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

Step 5 calls the function the setting ``IDEMPOTENCY_RUNNER`` names, read on
every request; without it, ``idempotency.core.execute``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import MethodNotAllowed, NotFound
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.views import APIView

from edge.api import current_user_id
from edge.bounds import fits_column
from edge.errors import PROBLEM_CONTENT_TYPE
from edge.openapi import ProblemSerializer
from idempotency.core import KeyRequest, Outcome
from idempotency.errors import IdempotencyKeyInvalid, IdempotencyKeyMissing
from idempotency.models import IdempotencyKey
from observability import context, tracking

JSON_CONTENT_TYPE = "application/json"
REPLAYED_HEADER = "Idempotent-Replayed"
# What runs a keyed request (``IDEMPOTENCY_RUNNER`` names another): the core.
DEFAULT_RUNNER = "idempotency.core.execute"


# --- The Idempotency-Key header: a bare token or an RFC 8941 sf-string ---------------

HEADER = "Idempotency-Key"

# 1-255 characters that need no escaping anywhere: URLs, logs, sf-strings.
_KEY_CHARS = r"[A-Za-z0-9\-_.:~]{1,255}"
_KEY_PATTERN = re.compile(_KEY_CHARS)
# The header as the schema states it: the key bare, or quoted as an sf-string.
HEADER_PATTERN = rf'^(?:{_KEY_CHARS}|"{_KEY_CHARS}")$'


def parse_idempotency_key(raw: str | None) -> str:
    """The key from the header value: a bare token or an RFC 8941 sf-string."""
    if raw is None:
        raise IdempotencyKeyMissing()
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        # sf-string. Our character set has neither '"' nor '\\', so no unescaping.
        value = value[1:-1]
    if not _KEY_PATTERN.fullmatch(value):
        raise IdempotencyKeyInvalid()
    return value


# --- The view -------------------------------------------------------------------------


class IdempotentApi(APIView):
    """Base class of the endpoints that create or move money or stock."""

    idempotency_key: str

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
        run = import_string(getattr(settings, "IDEMPOTENCY_RUNNER", DEFAULT_RUNNER))
        with tracking.idempotent_request(route=route_of(request)) as done:
            outcome = run(key_request, flow)
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
