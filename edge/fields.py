"""Serializer fields that take a JSON value of their own type and nothing else.

DRF's fields coerce: ``CharField`` takes ``0`` as ``"0"``, ``IntegerField`` takes
``"100"`` and ``100.0``. The schema says "string" and "integer", and a client
generator (or Schemathesis) holds the server to it; for money and stock a
coerced value is a client bug we would rather name than guess around.

A string field also says in the schema what DRF refuses in every string, a NUL
(no column can hold one): the ``pattern`` drf-spectacular publishes comes from a
``RegexValidator``, so a client generator does not send a request that gets a 400.
"""

from typing import Any

from django.core.validators import RegexValidator
from rest_framework import serializers

# Published as ``"pattern": "^[^\\u0000]*$"``; DRF's own NUL check still answers first.
NO_NUL = RegexValidator(r"^[^\x00]*$", "Null characters are not allowed.")


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer and nothing else: "100", 100.0 and true are refused."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A JSON string with no NUL and nothing else: 0 and true are refused."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators.append(NO_NUL)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictRegexField(serializers.RegexField):
    """A JSON string matching ``regex``; 0 and true are refused."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)
