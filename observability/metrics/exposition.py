"""``/metrics`` on the web server, and the same page (plus ``/healthz``) on a Celery
worker's own port.

Access: with ``METRICS_TOKEN`` set, ``Authorization: Bearer <METRICS_TOKEN>``
(compared in constant time) in every profile; without one, open in the demo
(``DEMO_MODE``) and closed to everybody in production. The scrape-time gauges are
served by the web only: a worker serves its own counters, so no series is
reported twice.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.multiprocess import MultiProcessCollector

from edge.errors import problem_response
from observability.errors import MetricsUnauthorized
from observability.metrics import multiproc
from observability.metrics.gauges import GaugeCollector

# The classic text format, which every Prometheus (2.x and 3.x) reads; every name here
# is a legacy-valid metric name, so no UTF-8 escaping is involved.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_gauges = CollectorRegistry(auto_describe=False)
_gauges.register(GaugeCollector())


def render(*, with_gauges: bool) -> bytes:
    """The exposition text: every process's counters (multiprocess mode), then gauges."""
    path = multiproc.directory()
    if path is None:
        registry = REGISTRY
    else:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(path))
    output = generate_latest(registry)
    return output + generate_latest(_gauges) if with_gauges else output


def allowed(authorization: str | None) -> bool:
    token = settings.METRICS_TOKEN
    if not token:
        # No token: open in the demo, closed to everybody in production.
        return settings.DEMO_MODE
    # A token, once set, is required in every profile (the demo's included).
    return hmac.compare_digest((authorization or "").encode(), f"Bearer {token}".encode())


def metrics(request: HttpRequest) -> HttpResponse:
    if not allowed(request.headers.get("Authorization")):
        return problem_response(MetricsUnauthorized())
    return HttpResponse(render(with_gauges=True), content_type=CONTENT_TYPE)


# --- A Celery worker's endpoint ------------------------------------------------------


def _worker_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ.get("PATH_INFO") == "/healthz":  # the worker's main process answers
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"status": "ok"}']
    if environ.get("PATH_INFO") != "/metrics":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]
    if not allowed(environ.get("HTTP_AUTHORIZATION")):
        start_response("401 Unauthorized", [("WWW-Authenticate", "Bearer")])
        return [b"unauthorized\n"]
    start_response("200 OK", [("Content-Type", CONTENT_TYPE)])
    return [render(with_gauges=False)]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A scrape every few seconds is not worth a log line."""


def serve_worker_metrics(*, bind: str, port: int) -> None:
    """Serve ``/metrics`` from a daemon thread of the worker's main process."""
    server = make_server(bind, port, _worker_app, ThreadingWSGIServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
