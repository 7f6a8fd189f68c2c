"""A pay request's key record as the fast paths' tests build and read it."""

from __future__ import annotations

import uuid
from typing import Any

from django.forms.models import model_to_dict
from django.utils import timezone

from idempotency.models import IdempotencyKey

# Every column two ways of writing a record must agree on (the id and the key differ).
COMPARED = [
    f.attname for f in IdempotencyKey._meta.concrete_fields if f.attname not in ("id", "key")
]


def pay_record(user: Any, key: str, **fields: Any) -> IdempotencyKey:
    """An unsaved record of a pay request at ``payment_created``, locked just now."""
    now = timezone.now()
    return IdempotencyKey(
        user_id=user.pk,
        key=key,
        fingerprint="f" * 64,
        method="POST",
        path="/api/v1/orders/1/pay/",
        recovery_point="payment_created",
        lock_token=uuid.uuid4(),
        locked_at=now,
        created_at=now,
        resource_type="payment",
        resource_id=7,
        **fields,
    )


def stored(key: str) -> dict[str, Any]:
    """The stored record under ``key``, its compared columns."""
    return model_to_dict(IdempotencyKey.objects.get(key=key), fields=COMPARED)
