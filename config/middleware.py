"""Request guards that must run before any view reads the body."""

from collections.abc import Callable
from io import BytesIO
from typing import IO

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from config.errors import LengthRequired, PayloadTooLarge, problem_response


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
