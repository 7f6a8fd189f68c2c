"""Writes of the sandbox provider: one function per business action, each owning
its transaction (``charges``: charge and close; ``refunds``: refund;
``late_success``: a declined charge that succeeds later; ``faults``: the chaos
script; ``notifications``: what a settled charge or refund sends, and when).
Shared machinery: ``idempotency`` (keys, races, after-commit faults) and
``wallets`` (conditional money moves).

The provider is the other side of the shop's idempotency story, so it must be
idempotent itself, and it must stay truthful when it misbehaves on purpose.
"""

from sandbox.services.charges import charge_close, charge_create
from sandbox.services.declines import (
    DECLINE_CHARGE_NOT_REFUNDABLE,
    DECLINE_EXCEEDS_REFUNDABLE,
    DECLINE_INSUFFICIENT_FUNDS,
    DECLINE_PENDING,
    DECLINE_SCRIPTED,
)
from sandbox.services.faults import fault_clear, fault_set
from sandbox.services.idempotency import Answer
from sandbox.services.late_success import late_success_settle
from sandbox.services.refunds import refund_create

__all__ = [
    "DECLINE_CHARGE_NOT_REFUNDABLE",
    "DECLINE_EXCEEDS_REFUNDABLE",
    "DECLINE_INSUFFICIENT_FUNDS",
    "DECLINE_PENDING",
    "DECLINE_SCRIPTED",
    "Answer",
    "charge_close",
    "charge_create",
    "fault_clear",
    "fault_set",
    "late_success_settle",
    "refund_create",
]
