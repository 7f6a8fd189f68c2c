"""Reads of idempotency records."""

from django.shortcuts import get_object_or_404

from idempotency.models import IdempotencyKey


def idempotency_key_get(*, user_id: int, key: str) -> IdempotencyKey:
    """The caller's own record for ``key``; another user's key is a 404 like a missing one."""
    return get_object_or_404(IdempotencyKey, user_id=user_id, key=key)
