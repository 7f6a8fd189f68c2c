"""Request guards that must run before any view reads the body."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from config.errors import PayloadTooLarge, problem_response


class BodySizeLimitMiddleware:
    """Refuse bodies over ``API_MAX_BODY_BYTES`` with 413 before anything parses them.

    A declared ``Content-Length`` is checked here; a body without one (chunked) is
    caught when Django reads it (``RequestDataTooBig``) and mapped to the same 413
    by the exception handler.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        declared = request.META.get("CONTENT_LENGTH") or "0"
        try:
            too_large = int(declared) > settings.API_MAX_BODY_BYTES
        except ValueError:
            too_large = False  # Django itself treats a garbled length as 0
        if too_large:
            return problem_response(PayloadTooLarge())
        return self.get_response(request)
