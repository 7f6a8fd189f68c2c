"""Who is asking: the client's address, as far as the deployment can vouch for it.

``X-Forwarded-For`` is a header like any other: a client sends whatever it likes,
so trusting it by default would let anyone pick the address every per-client
limit is keyed on, and get a fresh allowance per request. Only the entries that
our own proxies appended can be believed: each proxy appends the address it
received the request from, so with ``TRUSTED_PROXY_COUNT = N`` the client is the
N-th entry from the right; anything left of it is the client's own claim.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str:
    remote = str(request.META.get("REMOTE_ADDR", ""))
    proxies = settings.TRUSTED_PROXY_COUNT
    if proxies <= 0:
        return remote
    hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    hops = [hop for hop in hops if hop]
    # Fewer entries than proxies: the request skipped a proxy we count on. The peer
    # is the only address we know; never a value the client chose.
    return hops[-proxies] if len(hops) >= proxies else remote
