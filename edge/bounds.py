"""Will this value fit that column? Asked at the edge, before any SQL sees the value.

PostgreSQL refuses, with an exception that would surface as a 500, a string
longer than its ``varchar(n)``, an integer outside ``bigint``, and any text
holding NUL; psycopg cannot even send a string holding a lone surrogate. Every
value a client or a provider sends is checked here first, against the model
field it is meant for, and the caller turns a "no" into its own answer: a 400
with a code for a body, a 404 for a reference in a path (a value no row can
hold names nothing).

The bounds come from the model fields themselves (Django's validators of each
field: ``max_length``, the database's integer range), so a migration that
widens a column widens the check with it.
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db import models

# PostgreSQL's bigint; the amounts of every money column are bigint.
BIGINT_MAX = 2**63 - 1

_SURROGATE = re.compile("[\ud800-\udfff]")
_INTEGER_FIELDS = (models.IntegerField, models.BigIntegerField, models.SmallIntegerField)


def text_problem(value: str, *, max_length: int | None = None) -> str | None:
    """Why ``value`` cannot be stored as PostgreSQL text, or None if it can."""
    if "\x00" in value:
        return "holds a NUL character"
    if _SURROGATE.search(value):
        return "holds a lone surrogate"
    if max_length is not None and len(value) > max_length:
        return f"is longer than {max_length} characters"
    return None


def column_problem(model: type[models.Model], name: str, value: object) -> str | None:
    """Why ``value`` cannot be stored in ``model.name``, or None if it can."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field), f"{model.__name__}.{name} is not a column"
    if value is None:
        return None if field.null else "is required"
    if isinstance(field, models.CharField | models.TextField):
        if not isinstance(value, str):
            return "must be a string"
        if problem := text_problem(value, max_length=field.max_length):
            return problem
    elif isinstance(field, _INTEGER_FIELDS) and (
        # bool is an int in Python; no column of ours means 1 when it says true.
        not isinstance(value, int) or isinstance(value, bool)
    ):
        return "must be an integer"
    try:
        # The field's own validators: max_length, the integer range of the database.
        field.run_validators(value)
    except ValidationError as error:
        return " ".join(error.messages)
    return None


def fits_column(model: type[models.Model], name: str, value: object) -> bool:
    return column_problem(model, name, value) is None


def columns_problems(model: type[models.Model], values: dict[str, object]) -> list[str]:
    """``"name: why"`` for every value that does not fit its column (empty if all fit)."""
    return [
        f"{name}: {problem}"
        for name, value in values.items()
        if (problem := column_problem(model, name, value)) is not None
    ]
