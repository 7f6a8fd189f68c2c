"""Scripted faults: arm, clear, and consume them for a new charge or refund.

One row per (mode, target), each with its own counter, so modes stack. A count
is taken only by a charge (or refund) that really is new (never by a replay or
a dedupe), only from faults aimed at its kind, and only by a conditional
UPDATE, so two concurrent requests never share the last one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection
from django.utils import timezone

from demo.sandbox.models import Fault

# Without callback_shuffle's own delay_s, copies are spread over this many seconds:
# enough for a worker to pick them up in a visibly random order, short enough for
# the demo to show the outcome while someone watches.
SHUFFLE_SPREAD_S = 3.0


@dataclass(frozen=True)
class AppliedFaults:
    """The faults consumed by one new charge or refund (all off: a well-behaved provider)."""

    decline: bool = False
    fail_before_commit: bool = False
    fail_after_commit: bool = False
    delay_s: float = 0.0
    drop_notification: bool = False
    copies: int = 1
    shuffle_spread_s: float | None = None  # None: copies are sent at once, in order
    late_success_delay_s: float | None = None  # None: the outcome is final at once
    requires_action: bool = False  # the charge waits for the customer to act
    reversal_delay_s: float | None = None  # a refund: None, it never fails after succeeding
    dispute_delay_s: float | None = None  # a charge: None, it is never disputed

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[str, float, int]]) -> AppliedFaults:
        by_mode = {mode: (delay_s, copies) for mode, delay_s, copies in rows}
        Mode = Fault.Mode
        copies = 1
        for mode in (Mode.CALLBACK_DUPLICATES, Mode.CALLBACK_SHUFFLE):
            # Shuffling a single copy shows nothing, so shuffle brings its own copies.
            if mode in by_mode:
                copies = max(copies, by_mode[mode][1])
        shuffle = by_mode.get(Mode.CALLBACK_SHUFFLE)
        late = by_mode.get(Mode.LATE_SUCCESS)
        reversal = by_mode.get(Mode.REFUND_REVERSAL)
        dispute = by_mode.get(Mode.DISPUTE_LOST)
        return cls(
            decline=Mode.DECLINE in by_mode,
            fail_before_commit=Mode.ERROR_BEFORE_COMMIT in by_mode,
            fail_after_commit=Mode.ERROR_AFTER_COMMIT in by_mode,
            delay_s=by_mode.get(Mode.TIMEOUT_AFTER_COMMIT, (0.0, 0))[0],
            drop_notification=Mode.CALLBACK_DROP in by_mode,
            copies=copies,
            shuffle_spread_s=None if shuffle is None else (shuffle[0] or SHUFFLE_SPREAD_S),
            late_success_delay_s=None if late is None else late[0],
            requires_action=Mode.REQUIRES_ACTION in by_mode,
            reversal_delay_s=None if reversal is None else reversal[0],
            dispute_delay_s=None if dispute is None else dispute[0],
        )


NO_FAULTS = AppliedFaults()


def fault_set(
    *, mode: str, count: int, delay_s: float, copies: int, target: str = Fault.Target.CHARGE
) -> Fault:
    """Arm ``mode`` for the next ``count`` new charges or refunds (re-arming replaces
    its counter)."""
    # An upsert on the unique (mode, target): two staff clicks at once leave one row.
    (fault,) = Fault.objects.bulk_create(
        [Fault(mode=mode, target=target, remaining=count, delay_s=delay_s, copies=copies)],
        update_conflicts=True,
        unique_fields=["mode", "target"],
        update_fields=["remaining", "delay_s", "copies", "updated_at"],
    )
    return fault


def fault_clear() -> int:
    deleted, _ = Fault.objects.all().delete()
    return deleted


def _fault_take(modes: Sequence[str], target: str) -> list[tuple[str, float, int]]:
    """Consume one count of each active fault among ``modes``; return what was taken.

    One conditional UPDATE: ``remaining > 0`` is checked by PostgreSQL under the
    row lock, so two concurrent charges never both take the last count. The rows
    are locked in id order (the subquery) so that charges taking several faults
    at once cannot deadlock each other.
    """
    table = Fault._meta.db_table
    sql = (
        f"UPDATE {table} SET remaining = remaining - 1, updated_at = %s "  # noqa: S608 - our table
        f"WHERE remaining > 0 AND id IN ("
        f"  SELECT id FROM {table}"
        f"  WHERE mode = ANY(%s) AND target = %s AND remaining > 0 ORDER BY id FOR UPDATE"
        f") RETURNING mode, delay_s, copies"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [timezone.now(), list(modes), target])
        return [(mode, float(delay_s), int(copies)) for mode, delay_s, copies in cursor.fetchall()]


def fault_take_for(target: str) -> AppliedFaults:
    """The faults that apply to the new charge (or refund) being made, by ``target``.
    Call inside its transaction.

    error_before_commit is taken alone: that charge will not exist, so the other
    modes must stay armed for the next charge that does.
    """
    if _fault_take([Fault.Mode.ERROR_BEFORE_COMMIT], target):
        return AppliedFaults(fail_before_commit=True)
    others = [mode for mode in Fault.Mode.values if mode != Fault.Mode.ERROR_BEFORE_COMMIT]
    return AppliedFaults.from_rows(_fault_take(others, target))
