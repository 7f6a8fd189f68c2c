"""The reconciler's claim, lease and backoff machinery, for any attempt it resolves.

Payment attempts and refund attempts are reconciled the same way (see
``unsettled_payments.py`` and ``unsettled_refunds.py`` next to this module):
both models carry a ``status``, ``updated_at`` (the age of the attempt: its
last real change) and the bookkeeping ``reconcile_attempts`` /
``next_reconcile_at``. This module is the one implementation of how due rows
are leased, handed back and backed off; each pass loops over its batches itself.

Claiming: rows are leased in one short transaction (the due rows read with
``select_for_update(skip_locked=True)``, their lease written, committed) and
processed after it, so no row lock is held while we wait on the provider. Two
reconcilers get disjoint batches; even if a lease runs out under a slow one,
the settle services are conditional and settle each attempt once.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from django.conf import settings
from django.db import models, transaction
from django.db.models import F, Q

# Backoff exponents stop here: 2**20 x the base is far past any sane cap anyway.
_MAX_EXPONENT = 20


class Reconcilable(Protocol):
    pk: int
    reconcile_attempts: int
    next_reconcile_at: datetime | None


R = TypeVar("R", bound=models.Model)


def backoff_delay_s(
    *, attempt: int, base_s: float, cap_s: float, rand: Callable[[], float] = random.random
) -> float:
    """Seconds to wait before try ``attempt + 1`` after ``attempt`` failures (1, 2, ...).

    Exponential (base, 2 x base, 4 x base, ...) up to ``cap_s``, with "equal
    jitter": a uniformly random point in the upper half of that window. The
    random half spreads out attempts that failed together (a provider outage
    fails them all at once), so they do not all come back in the same second;
    the fixed half keeps a retry from landing right after the failure, which
    full jitter (0 .. window) would allow.
    """
    window = min(cap_s, base_s * 2 ** min(max(attempt, 1) - 1, _MAX_EXPONENT))
    return window / 2 + rand() * window / 2


def reconcile_backoff_s(attempt: int) -> float:
    """The reconciler's wait after ``attempt`` failed tries (or declines) of one row:
    ``backoff_delay_s`` with RECONCILE_BACKOFF_BASE_S and RECONCILE_BACKOFF_CAP_S."""
    return backoff_delay_s(
        attempt=attempt,
        base_s=settings.RECONCILE_BACKOFF_BASE_S,
        cap_s=settings.RECONCILE_BACKOFF_CAP_S,
    )


def claim_due(model: type[R], *, statuses: Sequence[str], now: datetime, limit: int) -> list[R]:
    """Lease up to ``limit`` due rows of ``model`` to this runner; return them.

    Due: in one of ``statuses``, untouched for RECONCILE_AFTER_S, and neither
    leased nor backing off. Oldest first, read straight off the model's partial
    index of unsettled rows, which holds only the work left to do. SKIP LOCKED:
    rows another runner is claiming right now are not waited for, they are
    simply not ours. ``updated_at`` is left alone (the age of an attempt is its
    last real change, not our bookkeeping).
    """
    lease_until = now + timedelta(seconds=settings.RECONCILE_LEASE_S)
    due_before = now - timedelta(seconds=settings.RECONCILE_AFTER_S)
    rows = model._default_manager
    # A short transaction of its own: the row locks end with it, before any
    # provider call.
    with transaction.atomic():
        due = list(
            rows.select_for_update(skip_locked=True)
            .filter(status__in=statuses, updated_at__lte=due_before)
            .filter(Q(next_reconcile_at__isnull=True) | Q(next_reconcile_at__lte=now))
            .order_by("updated_at")[:limit]
        )
        # QuerySet.update() leaves updated_at (auto_now) as it is.
        rows.filter(pk__in=[row.pk for row in due]).update(next_reconcile_at=lease_until)
    for row in due:
        row.next_reconcile_at = lease_until  # type: ignore[attr-defined]
    return due


def hand_back(model: type[models.Model], *, rows: Sequence[Reconcilable]) -> int:
    """End our lease on rows we claimed but did not get to: due again at once."""
    if not rows:
        return 0
    # One claim, one lease time. Matching on it ends only our lease: if it ran out
    # and another runner leased a row again, that lease is not ours to end.
    return model._default_manager.filter(
        pk__in=[row.pk for row in rows], next_reconcile_at=rows[0].next_reconcile_at
    ).update(next_reconcile_at=None)


def retry_later(
    model: type[models.Model], *, row: Reconcilable, statuses: Sequence[str], now: datetime
) -> None:
    """Count the failed try and put the row back after a backoff (if still in ``statuses``)."""
    delay = reconcile_backoff_s(row.reconcile_attempts + 1)
    model._default_manager.filter(pk=row.pk, status__in=statuses).update(
        reconcile_attempts=F("reconcile_attempts") + 1,
        next_reconcile_at=now + timedelta(seconds=delay),
    )
