"""The Idempotency-Key header: a bare token or an RFC 8941 sf-string, 1-255 safe characters."""

from __future__ import annotations

import re

from idempotency.errors import IdempotencyKeyInvalid, IdempotencyKeyMissing

HEADER = "Idempotency-Key"

# 1-255 characters that need no escaping anywhere: URLs, logs, sf-strings.
_KEY_CHARS = r"[A-Za-z0-9\-_.:~]{1,255}"
_KEY_PATTERN = re.compile(_KEY_CHARS)
# The header as the schema states it: the key bare, or quoted as an sf-string.
HEADER_PATTERN = rf'^(?:{_KEY_CHARS}|"{_KEY_CHARS}")$'


def parse_idempotency_key(raw: str | None) -> str:
    """The key from the header value: a bare token or an RFC 8941 sf-string."""
    if raw is None:
        raise IdempotencyKeyMissing()
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        # sf-string. Our character set has neither '"' nor '\\', so no unescaping.
        value = value[1:-1]
    if not _KEY_PATTERN.fullmatch(value):
        raise IdempotencyKeyInvalid()
    return value
