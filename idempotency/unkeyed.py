"""The key layer switched off (IDEMPOTENCY_ENABLED=false): the flow runs, nothing is kept.

Not a mode of the core: the HTTP integration (``idempotency/drf.py``) chooses
here not to use it. It exists for two readers: the test that shows the other
layers (the state machine's conditional updates, the unique indexes) still stop
a double charge and a double shipment on their own, and the benchmark that
measures what the layer costs (``make bench``, the peers, which put a package's
middleware in its place).

The same flows run, phase by phase, each phase in its own transaction, but
their record is never inserted (its ``journal`` writes nothing) and so never
read back: every request is new, a repeat runs the action again, and only the
business rows' own guards answer it.
"""

from __future__ import annotations

from collections.abc import Callable

from idempotency.core import KeyRequest, Outcome
from idempotency.models import IdempotencyKey, RecoveryPoint
from idempotency.phases import Journal


class _Unstored(Journal):
    def insert(self, record: IdempotencyKey) -> None:
        """Nothing: the record lives in memory only, for the flow's phases to read."""


_UNSTORED = _Unstored()


def run_unkeyed(request: KeyRequest, flow: Callable[[IdempotencyKey], None]) -> Outcome:
    """Run ``flow`` once for this request, with nothing stored under its key."""
    record = IdempotencyKey(
        user_id=request.user_id,
        key=request.key,
        fingerprint=request.fingerprint,
        recovery_point=RecoveryPoint.STARTED,
    )
    record.journal = _UNSTORED
    flow(record)
    if not record.is_finished:
        raise RuntimeError(f"flow returned at recovery point {record.recovery_point!r}")
    return Outcome.of(record, replayed=False)
