"""Agrees with ``idempotency/records.py``: its ``find`` and ``insert``, in hand-written SQL.

The record store the shipped settings name (``IDEMPOTENCY_RECORDS``). Every
request with a new key looks its record up, and every single-phase request
inserts it; with the ORM, building and compiling each query and the model
instance cost more CPU than PostgreSQL spends running it (see
docs/benchmarks.md, "The key layer"). ``find`` and ``insert`` send the same SQL
the ORM would, built once at import from the model's own columns, so a new
field in ``IdempotencyKey`` needs no change here. ``find`` answers its first
call of a request from the replay middleware's read (``fastpaths/replay.py``),
when that read was for the same user and key: a new key costs no second SELECT.
``token_and_record_find`` is that read: the token and the record in one SELECT.
``tests/fastpaths/test_records.py`` runs both stores on the same cases.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from rest_framework.authtoken.models import Token

from idempotency.models import IdempotencyKey

_FIELDS = list(IdempotencyKey._meta.concrete_fields)
_TABLE = IdempotencyKey._meta.db_table
_COLUMNS = ", ".join(connection.ops.quote_name(field.column) for field in _FIELDS)
_NAMES = [field.attname for field in _FIELDS]
# Fields whose database value needs converting back (the JSON headers).
_CONVERTED = [
    (index, field) for index, field in enumerate(_FIELDS) if hasattr(field, "from_db_value")
]
_INSERTED = [field for field in _FIELDS if field.attname != "id"]

# Identifiers come from the model, values are bound parameters: nothing from a request
# is ever spliced into the text. The unique (user_id, key) index answers the lookup.
_SELECT = f'SELECT {_COLUMNS} FROM "{_TABLE}" WHERE "user_id" = %s AND "key" = %s'  # noqa: S608
_INSERT = 'INSERT INTO "{}" ({}) VALUES ({}) RETURNING "id"'.format(  # noqa: S608
    _TABLE,
    ", ".join(connection.ops.quote_name(field.column) for field in _INSERTED),
    ", ".join(["%s"] * len(_INSERTED)),
)

# The record the replay middleware read for this request: (user id, key, record or
# None), until the first ``find`` takes it. Per request: the middleware sets it and
# clears it when the request ends (a context variable: each thread has its own).
_read: ContextVar[tuple[int, str, IdempotencyKey | None] | None] = ContextVar(
    "fastpaths_records_read", default=None
)


def hand_over(*, user_id: int, key: str, record: IdempotencyKey | None) -> None:
    """Give this request's first ``find`` the record just read for (user, key)."""
    _read.set((user_id, key, record))


def forget() -> None:
    """Drop what ``hand_over`` gave and no ``find`` took (the request is over)."""
    _read.set(None)


def find(*, user_id: int, key: str) -> IdempotencyKey | None:
    """The (user, key) record, or None: the middleware's read if it is this one and
    the request's first look, else one indexed SELECT."""
    read = _read.get()
    if read is not None:
        _read.set(None)  # once: any later look (after a race) reads the database
        if read[:2] == (user_id, key):
            return read[2]
    with connection.cursor() as cursor:
        cursor.execute(_SELECT, [user_id, key])
        row = cursor.fetchone()
    return None if row is None else _record_of(list(row))


def insert(record: IdempotencyKey) -> None:
    """INSERT an unsaved record with every field as it stands; raises IntegrityError
    when its (user, key) exists, exactly as ``save(force_insert=True)`` would."""
    params = [
        field.get_db_prep_save(getattr(record, field.attname), connection) for field in _INSERTED
    ]
    with connection.cursor() as cursor:
        cursor.execute(_INSERT, params)
        (record.pk,) = cursor.fetchone()
    # What save() records on the instance: it is in this database now.
    record._state.adding = False
    record._state.db = connection.alias


def _record_of(values: list[Any]) -> IdempotencyKey:
    for index, field in _CONVERTED:
        values[index] = field.from_db_value(values[index], None, connection)
    return IdempotencyKey.from_db(connection.alias, _NAMES, values)


# --- A request's token and its key's record, together (the replay's one round trip) ---

_User = get_user_model()
_USER_FIELDS = [field.attname for field in _User._meta.concrete_fields]
_TOKEN_FIELDS = [field.attname for field in Token._meta.concrete_fields]


def _columns(alias: str, model: Any) -> str:
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(field.column)}" for field in model._meta.concrete_fields)


# DRF's TokenAuthentication reads the token with its user (select_related); the
# record is the (user, key) row ``find`` reads. A LEFT JOIN on the token's user:
# one row when the token exists (the record's columns NULL when it has no record
# under this key), none when it does not. Both lookups are unique indexes.
_TOKEN_AND_RECORD = (
    f"SELECT {_columns('t', Token)}, {_columns('u', _User)}, {_columns('k', IdempotencyKey)}"  # noqa: S608
    f' FROM "{Token._meta.db_table}" t'
    f' JOIN "{_User._meta.db_table}" u ON u.id = t.user_id'
    f' LEFT JOIN "{_TABLE}" k ON k.user_id = t.user_id AND k.key = %s'
    " WHERE t.key = %s"
)


def token_and_record_find(
    *, token_key: str, key: str
) -> tuple[Token, IdempotencyKey | None] | None:
    """The token (its ``user`` loaded) and the user's record under ``key``, in one SELECT.

    None when no token has this key. Agrees with
    ``Token.objects.select_related("user").get(key=token_key)`` followed by
    ``idempotency.records.find(user_id=token.user_id, key=key)``.
    """
    with connection.cursor() as cursor:
        cursor.execute(_TOKEN_AND_RECORD, [key, token_key])
        row = cursor.fetchone()
    if row is None:
        return None
    token_end = len(_TOKEN_FIELDS)
    user_end = token_end + len(_USER_FIELDS)
    token = Token.from_db(connection.alias, _TOKEN_FIELDS, list(row[:token_end]))
    token.user = _User.from_db(connection.alias, _USER_FIELDS, list(row[token_end:user_end]))
    record_values = list(row[user_end:])
    record = None if record_values[0] is None else _record_of(record_values)
    return token, record
