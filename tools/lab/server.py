"""The shop (API and sandbox provider) served in this process, on a loopback port.

A threaded WSGI server, like the tests' live server: the experiments that go
over HTTP (the client's retries, the provider's charges) reach the real app,
on the lab's database, without a second process to start and stop.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


@contextmanager
def serving(port: int) -> Iterator[str]:
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.core.wsgi import get_wsgi_application

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass  # the lab reports counts, not access logs

    server = ThreadedWSGIServer((HOST, port), QuietHandler, allow_reuse_address=True)
    server.set_app(get_wsgi_application())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
