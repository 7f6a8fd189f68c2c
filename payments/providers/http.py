"""The provider's HTTP transport: kept-alive connections, and retries only where safe.

One session per process (``payments.providers.get_provider`` keeps it): every
pay, refund and reconcile question reuses an open connection to the provider
instead of paying a TCP handshake each time. Its pool holds as many
connections as the reconciler asks questions at once (RECONCILE_CONCURRENCY),
and at least one per gunicorn thread.

A kept-alive connection can go stale: the provider (or a proxy) closes it while
it sits idle, and the next request written on it meets a reset or an empty
answer. That must not become a 503 ``payment-outcome-unknown`` (nor an
unreachable provider for the reconciler), so such a request is sent once more,
on a new connection. That is safe here, and only because of what the provider
promises (payments/providers/CONTRACT.md): a query is a read; a charge, a
refund and a close carry our reference and our key, so a second copy is a
replay at the provider, never a second movement of money. What is never
retried: a read timeout (the provider may still be working on it; waiting
twice as long helps no one, the reconciler asks later) and any HTTP answer,
whatever its status: an answer is the provider's word and is read as such.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

import requests
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import ConnectionPool
from urllib3.exceptions import ReadTimeoutError
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry

# One more try on a new connection: a stale connection fails once; a provider that
# refuses or resets twice in a row is down, and the caller treats it as unreachable.
STALE_CONNECTION_RETRIES = 1
# Connections kept per provider host, at least: gunicorn's threads (8 per worker by
# default) each hold one while they wait on the provider.
MIN_POOL_SIZE = 16


class StaleConnectionRetry(Retry):
    """Retry a request that failed on its connection, never one that timed out waiting."""

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> Self:
        if isinstance(error, ReadTimeoutError):
            # Not retried: raised as it came, so requests reports it as the ReadTimeout it is.
            raise error
        return super().increment(method, url, response, error, _pool, _stacktrace)


def keepalive_session(*, pool_size: int) -> requests.Session:
    """A session whose connections stay open, with the one safe retry (see above)."""
    retry = StaleConnectionRetry(
        total=STALE_CONNECTION_RETRIES,
        connect=STALE_CONNECTION_RETRIES,  # refused or reset while connecting: nothing sent
        read=STALE_CONNECTION_RETRIES,  # reset or closed after sending, before any answer
        status=0,  # an answer is never retried
        other=0,
        redirect=0,
        allowed_methods=None,  # every call we make is idempotent at the provider
        raise_on_status=False,
        backoff_factor=0,  # a new connection at once: the old one was the problem
    )
    size = max(pool_size, MIN_POOL_SIZE)
    adapter = HTTPAdapter(pool_connections=1, pool_maxsize=size, max_retries=retry)
    session = requests.Session()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
