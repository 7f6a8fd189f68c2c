"""Reads of idempotency records."""

from django.http import Http404
from django.shortcuts import get_object_or_404

from edge.bounds import fits_column
from idempotency.models import IdempotencyKey


def idempotency_key_get(*, user_id: int, key: str) -> IdempotencyKey:
    """The caller's own record for ``key``; another user's key is a 404 like a missing one.

    A key no row can hold (NUL, lone surrogate, overlong) names nothing: 404 too.
    """
    if not fits_column(IdempotencyKey, "key", key):
        raise Http404
    return get_object_or_404(IdempotencyKey, user_id=user_id, key=key)
