"""The key layer's hand-written SQL (a fast path) agrees with the ORM (its reference).

``fastpaths.records`` against ``idempotency.records``: ``find`` against
``IdempotencyKey.objects.filter(...).first()``, ``insert`` against
``save(force_insert=True)``, on the same cases, the same rows and the same
answers; and the replay middleware's read, handed to the first ``find`` of its
request only, for its own user and key.
"""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.forms.models import model_to_dict

from fastpaths import records
from idempotency import records as core_records
from idempotency.models import IdempotencyKey
from tests.fastpaths.records import COMPARED, pay_record, stored

pytestmark = pytest.mark.django_db


def test_record_insert_writes_the_row_save_writes(user):
    # Given two records alike but for their key, one finished with an answer
    fields = {"response_status": None, "response_headers": {"Location": "/x/"}}
    reference, fast = (
        pay_record(user, "ref", **fields),
        pay_record(user, "fast", **fields),
    )
    fast.created_at = fast.locked_at = reference.created_at
    fast.lock_token = reference.lock_token

    # When the ORM inserts one and the fast path the other
    core_records.insert(reference)
    records.insert(fast)

    # Then the rows are the same, and both records know they are saved
    assert stored("fast") == stored("ref")
    assert fast.pk is not None
    assert (fast._state.adding, reference._state.adding) == (False, False)
    # ... and a second (user, key) fails both alike
    for insert in (core_records.insert, records.insert):
        with pytest.raises(IntegrityError), transaction.atomic():
            insert(pay_record(user, "fast"))


@pytest.mark.parametrize("key", ["stored", "absent"])
def test_record_find_answers_what_the_orm_answers(user, other_user, key):
    pay_record(user, "stored", response_headers={"Retry-After": "3"}).save(force_insert=True)

    fast = records.find(user_id=user.pk, key=key)
    reference = core_records.find(user_id=user.pk, key=key)

    assert (fast is None) == (reference is None)
    if reference is not None:
        assert fast is not None
        assert model_to_dict(fast, fields=[*COMPARED, "id"]) == model_to_dict(
            reference, fields=[*COMPARED, "id"]
        )
        assert fast._state.adding is False
    # ... and another user's key is not found by either
    assert records.find(user_id=other_user.pk, key="stored") is None
    assert core_records.find(user_id=other_user.pk, key="stored") is None


def test_the_middlewares_read_answers_the_first_find_of_its_user_and_key_only(
    user, other_user, django_assert_num_queries
):
    stored = pay_record(user, "stored")
    stored.save(force_insert=True)
    handed = IdempotencyKey.objects.get(pk=stored.pk)

    try:
        # The first look at the same user and key: the record read, no statement
        records.hand_over(user_id=user.pk, key="stored", record=handed)
        with django_assert_num_queries(0):
            assert records.find(user_id=user.pk, key="stored") is handed
        # ... once: the next look reads the database
        with django_assert_num_queries(1):
            again = records.find(user_id=user.pk, key="stored")
        assert again is not None
        assert again is not handed
        assert again.pk == handed.pk

        # A read of "no record" is an answer too
        records.hand_over(user_id=user.pk, key="absent", record=None)
        with django_assert_num_queries(0):
            assert records.find(user_id=user.pk, key="absent") is None

        # Another user's or another key's first look is not answered by it, and uses it up
        for user_id, key in [(other_user.pk, "stored"), (user.pk, "other")]:
            records.hand_over(user_id=user.pk, key="stored", record=handed)
            with django_assert_num_queries(1):
                assert records.find(user_id=user_id, key=key) is None
            with django_assert_num_queries(1):
                assert records.find(user_id=user.pk, key="stored") is not handed

        # Forgotten at the end of its request: never answers a later one
        records.hand_over(user_id=user.pk, key="stored", record=handed)
        records.forget()
        with django_assert_num_queries(1):
            assert records.find(user_id=user.pk, key="stored") is not handed
    finally:
        records.forget()
