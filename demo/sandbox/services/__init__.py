"""Writes of the sandbox provider: one function per business action, each owning
its transaction (``charges``: charge and close; ``customer_action``: the customer
completing or abandoning a charge that waits for them; ``refunds``: refund;
``late_success``: a declined charge that succeeds later; ``faults``: the chaos
script; ``notifications``: what a settled charge or refund sends, and when).
Shared machinery: ``idempotency`` (keys, races, after-commit faults) and
``wallets`` (conditional money moves).

The provider is the other side of the shop's idempotency story, so it must be
idempotent itself, and it must stay truthful when it misbehaves on purpose.
"""

from demo.sandbox.services.charges import charge_close, charge_create
from demo.sandbox.services.customer_action import charge_customer_act
from demo.sandbox.services.declines import (
    DECLINE_CHARGE_NOT_REFUNDABLE,
    DECLINE_EXCEEDS_REFUNDABLE,
    DECLINE_INSUFFICIENT_FUNDS,
    DECLINE_PENDING,
    DECLINE_SCRIPTED,
)
from demo.sandbox.services.faults import fault_clear, fault_set
from demo.sandbox.services.idempotency import Answer
from demo.sandbox.services.late_success import late_success_settle
from demo.sandbox.services.refunds import refund_create

__all__ = [
    "DECLINE_CHARGE_NOT_REFUNDABLE",
    "DECLINE_EXCEEDS_REFUNDABLE",
    "DECLINE_INSUFFICIENT_FUNDS",
    "DECLINE_PENDING",
    "DECLINE_SCRIPTED",
    "Answer",
    "charge_close",
    "charge_create",
    "charge_customer_act",
    "fault_clear",
    "fault_set",
    "late_success_settle",
    "refund_create",
]
