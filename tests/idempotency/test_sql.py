"""The key layer's hand-written SQL (a fast path) agrees with the ORM (its reference).

``record_find`` against ``IdempotencyKey.objects.get`` and ``record_insert`` against
``save(force_insert=True)``: the same cases through both, the same rows and the
same answers.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.forms.models import model_to_dict
from django.utils import timezone

from idempotency.models import IdempotencyKey
from idempotency.sql import record_find, record_insert

pytestmark = pytest.mark.django_db

COMPARED = [
    f.attname for f in IdempotencyKey._meta.concrete_fields if f.attname not in ("id", "key")
]


def _record(user: Any, key: str, **fields: Any) -> IdempotencyKey:
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


def _row(key: str) -> dict[str, Any]:
    return model_to_dict(IdempotencyKey.objects.get(key=key), fields=COMPARED)


def test_record_insert_writes_the_row_save_writes(user):
    # Given two records alike but for their key, one finished with an answer
    fields = {"response_status": None, "response_headers": {"Location": "/x/"}}
    reference, fast = _record(user, "ref", **fields), _record(user, "fast", **fields)
    fast.created_at = fast.locked_at = reference.created_at
    fast.lock_token = reference.lock_token

    # When the ORM inserts one and the fast path the other
    reference.save(force_insert=True)
    record_insert(fast)

    # Then the rows are the same, and both records know they are saved
    assert _row("fast") == _row("ref")
    assert fast.pk is not None
    assert (fast._state.adding, reference._state.adding) == (False, False)
    # ... and a second (user, key) fails both alike
    for insert in (lambda r: r.save(force_insert=True), record_insert):
        with pytest.raises(IntegrityError), transaction.atomic():
            insert(_record(user, "fast"))


@pytest.mark.parametrize("key", ["stored", "absent"])
def test_record_find_answers_what_the_orm_answers(user, other_user, key):
    _record(user, "stored", response_headers={"Retry-After": "3"}).save(force_insert=True)

    fast = record_find(user_id=user.pk, key=key)
    reference = IdempotencyKey.objects.filter(user_id=user.pk, key=key).first()

    assert (fast is None) == (reference is None)
    if reference is not None:
        assert fast is not None
        assert model_to_dict(fast, fields=[*COMPARED, "id"]) == model_to_dict(
            reference, fields=[*COMPARED, "id"]
        )
        assert fast._state.adding is False
    # ... and another user's key is not found by either
    assert record_find(user_id=other_user.pk, key="stored") is None
