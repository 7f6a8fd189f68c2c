"""Agrees with ``idempotency.core.execute`` on the flow only: the key layer switched off.

Not a fast path: the benchmark's and the tests' plug that turns the layer off
(``IDEMPOTENCY_ENABLED=false``), kept outside the core because a switch that
turns a layer off lives where the layer is plugged in. config/settings maps the
variable to two settings: ``IDEMPOTENCY_RUNNER`` names ``run_unkeyed`` (in
place of ``execute``) and ``IDEMPOTENCY_RECORDS`` names this module (a record
store that keeps nothing); ``LAYER_OFF`` is the same for ``override_settings``.
It exists for two readers: the test that shows the other layers (the state
machine's conditional updates, the unique indexes) still stop a double charge
and a double shipment on their own, and the benchmark that measures what the
layer costs (``make bench``, the peers, which put a package's middleware in its
place).

The same flows run, phase by phase, each phase in its own transaction, but
their record is never inserted (``insert`` writes nothing) and so never read
back: every request is new, a repeat runs the action again, and only the
business rows' own guards answer it. Nothing is looked up, stored or replayed,
and no quota is counted. A record never inserted has no ``pk``, so the phases
never touch the database for it (no fenced UPDATE, no ``release``).
"""

from __future__ import annotations

from collections.abc import Callable

from idempotency.core import KeyRequest, Outcome
from idempotency.models import IdempotencyKey, RecoveryPoint

LAYER_OFF = {
    "IDEMPOTENCY_ENABLED": False,
    "IDEMPOTENCY_RUNNER": "fastpaths.unkeyed.run_unkeyed",
    "IDEMPOTENCY_RECORDS": "fastpaths.unkeyed",
}


def run_unkeyed(request: KeyRequest, flow: Callable[[IdempotencyKey], None]) -> Outcome:
    """Run ``flow`` once for this request, with nothing stored under its key."""
    record = IdempotencyKey(
        user_id=request.user_id,
        key=request.key,
        fingerprint=request.fingerprint,
        recovery_point=RecoveryPoint.STARTED,
    )
    flow(record)
    if not record.is_finished:
        raise RuntimeError(f"flow returned at recovery point {record.recovery_point!r}")
    return Outcome.of(record, replayed=False)


def find(*, user_id: int, key: str) -> IdempotencyKey | None:
    """Nothing is ever stored, so nothing is found."""
    return None


def insert(record: IdempotencyKey) -> None:
    """Nothing: the record lives in memory only, for the flow's phases to read."""
