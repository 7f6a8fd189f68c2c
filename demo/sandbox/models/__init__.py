"""The sandbox provider's own tables: wallets, charges, refunds, its idempotency
records, outgoing notifications and scripted faults.

Money is an integer in minor units. Every rule that must hold under concurrency
is a database constraint, so a bug in a service cannot break it silently.
"""

from demo.sandbox.models.charges import Charge, Refund
from demo.sandbox.models.disputes import Dispute
from demo.sandbox.models.faults import Fault
from demo.sandbox.models.records import IdempotencyRecord, Notification
from demo.sandbox.models.wallets import Wallet

__all__ = ["Charge", "Dispute", "Fault", "IdempotencyRecord", "Notification", "Refund", "Wallet"]
