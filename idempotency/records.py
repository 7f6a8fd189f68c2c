"""Where the core looks a key's record up and inserts it: the ORM.

``find`` and ``insert`` are the two statements every new key costs. The
setting ``IDEMPOTENCY_RECORDS`` names the module the core calls them on
(``store()``), read on every call; without it, this one. Another store must
answer exactly what these two answer, row for row.
"""

from __future__ import annotations

from importlib import import_module
from typing import Protocol, cast

from django.conf import settings

from idempotency.models import IdempotencyKey


def find(*, user_id: int, key: str) -> IdempotencyKey | None:
    """The (user, key) record, or None: one SELECT on the unique (user, key) index."""
    return IdempotencyKey.objects.filter(user_id=user_id, key=key).first()


def insert(record: IdempotencyKey) -> None:
    """INSERT a new record; IntegrityError when its (user, key) exists."""
    record.save(force_insert=True)


class Store(Protocol):
    def find(self, *, user_id: int, key: str) -> IdempotencyKey | None: ...

    def insert(self, record: IdempotencyKey) -> None: ...


def store() -> Store:
    """The module ``IDEMPOTENCY_RECORDS`` names, or this one."""
    return cast(Store, import_module(getattr(settings, "IDEMPOTENCY_RECORDS", __name__)))
