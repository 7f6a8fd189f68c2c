"""Serializer fields that take a JSON value of their own type and nothing else.

DRF's fields coerce: ``CharField`` takes ``0`` as ``"0"``, ``IntegerField`` takes
``"100"`` and ``100.0``. The schema says "string" and "integer", and a client
generator (or Schemathesis) holds the server to it; for money and stock a
coerced value is a client bug we would rather name than guess around.
"""

from typing import Any

from rest_framework import serializers


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer and nothing else: "100", 100.0 and true are refused."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A JSON string and nothing else: 0 and true are refused."""

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
