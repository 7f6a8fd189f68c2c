"""Who the caller is, with every credential a client sends bounded by its column.

- ``TokenAuthentication``: the API's token. DRF's own class, with one change: a
  presented token that no row can hold (a NUL, a lone surrogate, longer than the
  column) is refused as unknown instead of reaching SQL, which would fail on it.
  (The token endpoint is in edge/auth_api.py: this module is loaded with the
  settings, before DRF's views can be imported.)
- ``SessionStore``: the pages' database sessions (``SESSION_ENGINE``). A
  ``sessionid`` cookie is the client's to write: ``"\\000..."`` unquotes to a NUL,
  which PostgreSQL cannot even compare, and the lookup would fail with a 500. A
  key that does not fit the column is treated like any unknown key: no session.
"""

from typing import Any

from django.contrib.sessions.backends import db
from django.contrib.sessions.models import Session
from rest_framework import authentication, exceptions
from rest_framework.authtoken.models import Token

from edge.bounds import fits_column


class TokenAuthentication(authentication.TokenAuthentication):
    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        if not fits_column(Token, "key", key):
            raise exceptions.AuthenticationFailed("Invalid token.")
        return super().authenticate_credentials(key)


class SessionStore(db.SessionStore):
    def _validate_session_key(self, key: Any) -> bool:
        valid = super()._validate_session_key(key)  # type: ignore[misc]
        return bool(valid) and fits_column(Session, "session_key", key)
