"""Request guards that must run before any view reads the body."""

from collections.abc import Callable
from io import BytesIO
from typing import IO

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from rest_framework.exceptions import MethodNotAllowed

from edge.errors import (
    HeaderFieldsTooLarge,
    LengthRequired,
    PayloadTooLarge,
    UriTooLong,
    problem_response,
)
from edge.handler import as_application_error
from edge.http_limits import MAX_HEADER_FIELD_CHARS, MAX_HEADER_FIELDS, MAX_REQUEST_TARGET_CHARS


class RequestHeadLimitMiddleware:
    """Refuse a request head past the shop's limits (edge/http_limits.py): 414, 431.

    gunicorn's own limits are set above these (config/gunicorn.py), so the client
    gets the shop's problem+json, with a code, instead of gunicorn's HTML page.
    Checked before anything reads the request (sessions, throttles, the body).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        meta = request.META
        # gunicorn hands over the target as sent; elsewhere, the path re-quoted.
        target = meta.get("RAW_URI") or request.get_full_path()
        if len(target) > MAX_REQUEST_TARGET_CHARS:
            return problem_response(UriTooLong())
        fields = [
            (name.removeprefix("HTTP_"), str(value))
            for name, value in meta.items()
            if name.startswith("HTTP_") or (name in {"CONTENT_TYPE", "CONTENT_LENGTH"} and value)
        ]
        if len(fields) > MAX_HEADER_FIELDS:
            return problem_response(HeaderFieldsTooLarge("There are too many header fields."))
        # A field as sent: "Name: value".
        if any(len(name) + 2 + len(value) > MAX_HEADER_FIELD_CHARS for name, value in fields):
            return problem_response(HeaderFieldsTooLarge("A header field is too long."))
        return self.get_response(request)


class MethodNotAllowedMiddleware:
    """Django's own 405 (``require_POST`` and its kind: an empty body) as problem+json.

    The API's views are DRF's, whose 405 is already a problem; this covers the
    pages and every other view of Django's, with the same ``Allow`` header.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not isinstance(response, HttpResponseNotAllowed):
            return response
        problem = problem_response(as_application_error(MethodNotAllowed(str(request.method))))
        problem["Allow"] = response["Allow"]
        return problem


class BodySizeLimitMiddleware:
    """Refuse bodies over ``API_MAX_BODY_BYTES`` with 413 before anything parses them.

    A declared ``Content-Length`` is checked here; Django also raises
    ``RequestDataTooBig`` (mapped to the same 413) if a view reads more.

    A body without ``Content-Length`` (``Transfer-Encoding: chunked``) is where
    Django falls short: it reads exactly ``CONTENT_LENGTH`` bytes, so a missing one
    means an empty body, and a valid order would be answered "lines: required".
    Such a body is read here, whole and under the same limit, when the server
    says its input stream ends where the body ends (``wsgi.input_terminated``:
    gunicorn decodes the chunks and sets it); Django then sees an ordinary body
    with a length. A server that does not say so (runserver) gets 411
    ``length-required``: reading on could wait forever.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.API_MAX_BODY_BYTES
        declared = request.META.get("CONTENT_LENGTH")
        if not declared and "HTTP_TRANSFER_ENCODING" in request.META:
            if not request.META.get("wsgi.input_terminated"):
                return problem_response(LengthRequired())
            body = _read_up_to(request.META["wsgi.input"], limit + 1)
            if len(body) > limit:
                return problem_response(PayloadTooLarge())
            # What WSGIRequest would have built had the length been declared.
            request.META["CONTENT_LENGTH"] = str(len(body))
            request._stream = BytesIO(body)
            return self.get_response(request)
        try:
            too_large = int(declared or "0") > limit
        except ValueError:
            too_large = False  # Django itself treats a garbled length as 0
        if too_large:
            return problem_response(PayloadTooLarge())
        return self.get_response(request)


def _read_up_to(stream: IO[bytes], size: int) -> bytes:
    """At most ``size`` bytes: a terminated stream may return fewer per read."""
    chunks: list[bytes] = []
    remaining = size
    while remaining > 0 and (chunk := stream.read(remaining)):
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
