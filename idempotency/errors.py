"""Errors of the Idempotency-Key layer (codes are part of the public contract)."""

import math
from typing import Any

from django.utils.translation import gettext_noop

from edge.errors import ApplicationError, TooManyRequests


class IdempotencyKeyMissing(ApplicationError):
    """The unsafe request carries no Idempotency-Key header."""

    code = "idempotency-key-missing"
    title = gettext_noop("Idempotency-Key required")
    default_detail = "This request changes money or stock: send an Idempotency-Key header."


class IdempotencyKeyInvalid(ApplicationError):
    """The header is not 1-255 characters from A-Z a-z 0-9 - _ . : ~ (bare or sf-string)."""

    code = "idempotency-key-invalid"
    title = gettext_noop("Idempotency-Key malformed")
    default_detail = (
        "The Idempotency-Key must be 1-255 characters from A-Z a-z 0-9 - _ . : ~, "
        'bare or as a quoted string ("...").'
    )


class IdempotencyKeyInUse(ApplicationError):
    """Another request with the same key is still running (or took this one over)."""

    status = 409
    code = "idempotency-key-in-use"
    title = gettext_noop("Request in progress")
    default_detail = "A request with this Idempotency-Key is in progress; retry shortly."

    def __init__(
        self, detail: str | None = None, *, retry_after: float = 1.0, **extra: Any
    ) -> None:
        super().__init__(detail, **extra)
        # From the holder's lock (core.lock_remaining_s): when a live holder will
        # have finished, or, past that, when a dead one's lock may be taken over.
        # Never 0: "retry at once" is the storm Retry-After exists to prevent.
        self.headers["Retry-After"] = str(max(1, math.ceil(retry_after)))


class IdempotencyKeyMismatch(ApplicationError):
    """The key was used before with a different method, route or body."""

    status = 422
    code = "idempotency-key-mismatch"
    title = gettext_noop("Idempotency-Key reused with a different request")
    default_detail = (
        "This Idempotency-Key was already used for a different request; "
        "use a new key for a new request."
    )


class UnknownRecoveryPoint(RuntimeError):
    """A record sits at a recovery point its flow does not know: a programming error."""


class IdempotencyKeyQuota(TooManyRequests):
    """The user created MAX_KEYS_PER_USER_PER_HOUR records this hour; no new one now.

    Checked before a record is written, and only for a new key: a replay of a stored
    answer never counts and is never refused. Nothing is stored, so the same request
    succeeds after Retry-After.
    """

    code = "idempotency-key-quota"
    title = gettext_noop("Idempotency-Key quota reached")
    default_detail = "Too many new Idempotency-Keys this hour; retry after the Retry-After."
