"""Agrees with ``edge.auth.TokenAuthentication``: the same answers, from the replay's read.

The API's token authentication (the shipped settings name it in REST_FRAMEWORK's
DEFAULT_AUTHENTICATION_CLASSES). The replay middleware (``fastpaths/replay.py``)
reads the presented token with its user in the SELECT that finds the key's
record; a request it does not answer comes to the view with that read, and this
class takes the token from it instead of reading it again. Every check of DRF's
class is kept (header syntax, unknown token, inactive user, the column bound of
``edge.auth``); only the SELECT is saved. Anything else (nothing read, another
token, a token unknown or its user inactive) goes to DRF's own query and its own
refusal, word for word. ``tests/fastpaths/test_agreement.py`` runs the behaviour
matrix with and without it.

(Loaded with DRF's settings, while ``rest_framework.views`` is being imported:
this module imports no view.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest
from rest_framework.authtoken.models import Token
from rest_framework.request import Request

from edge.auth import TokenAuthentication

if TYPE_CHECKING:
    from idempotency.models import IdempotencyKey


@dataclass(frozen=True)
class TokenRead:
    """What the replay middleware read before the view: the token presented (None: no
    such token) with its user, and that user's record under the request's key."""

    token_key: str
    key: str
    token: Token | None
    record: IdempotencyKey | None


# The attribute of the Django request that holds it (DRF's Request reads it through).
_READ = "fastpaths_token_read"


def remember(request: HttpRequest, read: TokenRead) -> None:
    """Keep the middleware's read on the request, for the view's authentication."""
    setattr(request, _READ, read)


class ReadTokenAuthentication(TokenAuthentication):
    """The API's token authentication, reusing the token the replay middleware read."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        self._read: TokenRead | None = getattr(request._request, _READ, None)
        return super().authenticate(request)

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        read = self._read
        if read is None or read.token_key != key or read.token is None:
            return super().authenticate_credentials(key)
        if not read.token.user.is_active:
            return super().authenticate_credentials(key)  # DRF's refusal, in its words
        return read.token.user, read.token
