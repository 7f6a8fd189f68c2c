"""The API's token authentication, hardened at the edge.

DRF's own class, with one change: a presented token that no row can hold (a
NUL, a lone surrogate, longer than the column) is refused as unknown instead of
reaching SQL, which would fail on it. (The token endpoint is in edge/auth_api.py:
this module is loaded with the settings, before DRF's views can be imported.)
"""

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.authtoken.models import Token

from edge.bounds import fits_column


class TokenAuthentication(authentication.TokenAuthentication):
    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        if not fits_column(Token, "key", key):
            raise exceptions.AuthenticationFailed("Invalid token.")
        return super().authenticate_credentials(key)
