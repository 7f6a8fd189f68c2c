"""Per request: a request id, the log context, the access line and the request metrics."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from observability import context, health
from observability.logs import LOG_CONTEXT_ATTRIBUTE
from observability.metrics import exposition, instruments

logger = logging.getLogger("onceshop.access")

# The probes and the scrape answer before any other middleware: no host check,
# session, CSRF or throttle work, and no log line every few seconds. path -> view.
PROBES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": health.healthz,
    "/readyz": health.readyz,
    "/metrics": exposition.metrics,
}


def route_of(request: HttpRequest) -> str:
    """The route's name (``orders:order-pay``), never the raw path: bounded label values."""
    match = getattr(request, "resolver_match", None)
    return match.view_name if match is not None and match.view_name else "unmatched"


class RequestObservabilityMiddleware:
    """First in MIDDLEWARE, so it sees every answer, a 413 from the size guard included.

    The request id is the caller's ``X-Request-ID`` when that is a sane token (a
    gateway's, or the shop's own when the provider is called), else a new one; it
    is bound for every line logged while the request runs, sent on to the
    provider and to tasks enqueued, and returned in the response.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path_info)
        if probe is not None:
            return probe(request)
        raw = request.META.get("HTTP_X_REQUEST_ID")
        request_id = context.sane_request_id(raw) or context.new_request_id()
        token = context.start(request_id=request_id)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            elapsed = time.perf_counter() - started
            route = route_of(request)
            instruments.observe_request(
                route=route,
                method=request.method or "",
                status=response.status_code,
                seconds=elapsed,
            )
            self._access_line(request, response, route, elapsed)
            setattr(request, LOG_CONTEXT_ATTRIBUTE, context.current())  # for django.request
            response[context.REQUEST_ID_HEADER] = request_id
            return response
        finally:
            context.reset(token)

    def process_view(
        self, request: HttpRequest, view: Any, args: Any, kwargs: dict[str, Any]
    ) -> None:
        # The order routes name the order `number`, the provider's routes the attempt's
        # `out_trade_no` or the refund's `out_refund_no`: what the request is about is
        # known from here on.
        context.bind(
            order_number=kwargs.get("number"),
            out_trade_no=kwargs.get("out_trade_no"),
            out_refund_no=kwargs.get("out_refund_no"),
        )

    @staticmethod
    def _access_line(
        request: HttpRequest, response: HttpResponse, route: str, elapsed: float
    ) -> None:
        # A shop user (session or token); the sandbox's merchant is not one.
        user = getattr(request, "user", None)
        if getattr(user, "is_authenticated", False):
            context.bind(user_id=getattr(user, "pk", None))
        logger.info(
            "%s %s %s %.1f ms",
            request.method,
            route,
            response.status_code,
            elapsed * 1000,
            extra={"status": response.status_code, "duration_ms": round(elapsed * 1000, 1)},
        )
