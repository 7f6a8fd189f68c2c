"""Writes of the sandbox provider: one function per business action, each owning
its transaction (``charges``: charge and close; ``faults``: the chaos script;
``notifications``: what a settled charge sends, and when).

The provider is the other side of the shop's idempotency story, so it must be
idempotent itself, and it must stay truthful when it misbehaves on purpose.
"""

from sandbox.services.charges import (
    DECLINE_INSUFFICIENT_FUNDS,
    DECLINE_SCRIPTED,
    ChargeAnswer,
    charge_close,
    charge_create,
)
from sandbox.services.faults import fault_clear, fault_set

__all__ = [
    "DECLINE_INSUFFICIENT_FUNDS",
    "DECLINE_SCRIPTED",
    "ChargeAnswer",
    "charge_close",
    "charge_create",
    "fault_clear",
    "fault_set",
]
