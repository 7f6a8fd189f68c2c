"""The key layer's two hot statements, written by hand.

Every request with a new key looks its record up, and every single-phase
request inserts it; with the ORM, building and compiling each query and the
model instance cost more CPU than PostgreSQL spends running it (see
docs/benchmarks.md, "The key layer"). These two functions send the same SQL
the ORM would, built once at import from the model's own columns, so a new
field in ``IdempotencyKey`` needs no change here. Everything else about the
record (the fenced UPDATEs, the completer, the reaper) stays in the ORM.
"""

from __future__ import annotations

from django.db import connection

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


def record_find(*, user_id: int, key: str) -> IdempotencyKey | None:
    """The (user, key) record, or None: one indexed SELECT."""
    with connection.cursor() as cursor:
        cursor.execute(_SELECT, [user_id, key])
        row = cursor.fetchone()
    if row is None:
        return None
    values = list(row)
    for index, field in _CONVERTED:
        values[index] = field.from_db_value(values[index], None, connection)
    return IdempotencyKey.from_db(connection.alias, _NAMES, values)


def record_insert(record: IdempotencyKey) -> None:
    """INSERT an unsaved record with every field as it stands; raises IntegrityError
    when its (user, key) exists, exactly as ``save(force_insert=True)`` would."""
    params = [
        field.get_db_prep_save(getattr(record, field.attname), connection) for field in _INSERTED
    ]
    with connection.cursor() as cursor:
        cursor.execute(_INSERT, params)
        (record.pk,) = cursor.fetchone()
    record._state.adding = False
    record._state.db = connection.alias
