"""A Content-Security-Policy on every page: scripts and styles come from the shop.

The pages (the shop's, the admin's, the problem types, the API docs) load their
scripts and style sheets from their own origin; nothing inline runs unless its
tag carries this response's nonce (``{{ csp_nonce }}`` in a template). So a
string that slips into a page unescaped cannot run as script, send a form
elsewhere or frame the page. The shop's own templates need no nonce: their
scripts are files, and the sentences the scripts show travel in a JSON island
(``type="application/json"``, never executed). Django 5.2 has no CSP of its own;
this is the whole of it.

Only HTML answers get the header: JSON and files are not documents a browser
runs scripts in.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"
# 128 bits per response: a nonce is as good as it is unguessable.
NONCE_BYTES = 16


def policy(nonce: str) -> str:
    return "; ".join(
        [
            "default-src 'self'",
            f"script-src 'self' 'nonce-{nonce}'",
            f"style-src 'self' 'nonce-{nonce}'",
            # The admin's and Swagger UI's icons are files or data: URIs in their CSS.
            "img-src 'self' data:",
            "object-src 'none'",
            # No <base> may send relative URLs elsewhere, no form post leave the site.
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        nonce = secrets.token_urlsafe(NONCE_BYTES)
        request.csp_nonce = nonce  # type: ignore[attr-defined]
        response = self.get_response(request)
        html = response.get("Content-Type", "").startswith("text/html")
        if html and HEADER not in response:
            response[HEADER] = policy(nonce)
        return response


def csp_nonce(request: HttpRequest) -> dict[str, str]:
    """The templates' ``{{ csp_nonce }}``: the nonce of the response being rendered."""
    return {"csp_nonce": getattr(request, "csp_nonce", "")}
