"""Django's database sessions, refusing a session cookie no row can hold.

A ``sessionid`` cookie is the client's to write: ``"\\000..."`` unquotes to a NUL,
which PostgreSQL cannot even compare, and the lookup would fail with a 500.
A key that does not fit the column is treated like any unknown key: no session.
"""

from typing import Any

from django.contrib.sessions.backends import db
from django.contrib.sessions.models import Session

from edge.bounds import fits_column


class SessionStore(db.SessionStore):
    def _validate_session_key(self, key: Any) -> bool:
        valid = super()._validate_session_key(key)  # type: ignore[misc]
        return bool(valid) and fits_column(Session, "session_key", key)
