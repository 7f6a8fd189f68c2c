"""What only some providers do, beside the protocol every one honours (``base``).

The flows, the reconciler and the audit ask ``isinstance(provider, <capability>)``,
never for a provider by name: a new adapter gets each behaviour by having the
method, and nothing outside ``payments/providers/`` changes.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from payments.providers.base import WalletStatement


@runtime_checkable
class PreparesCharges(Protocol):
    """A provider whose charge is two calls: create (nothing moves), then confirm.

    The pay flow commits what ``prepare_charge`` returns (the provider's id for
    the attempt, kept as its ``trade_no``) in a recovery point of its own before
    it calls ``charge``, so a crash or a lost answer between the two resumes with
    the same provider object instead of creating another. Stripe's PaymentIntent.
    """

    def prepare_charge(
        self, *, out_trade_no: str, amount: int, currency: str, idempotency_key: str
    ) -> str:
        """Create the attempt at the provider (idempotent on the key); its id.

        Raises ProviderRejected (nothing created) or ProviderOutcomeUnknown.
        """
        ...


@runtime_checkable
class KeepsWallets(Protocol):
    """A provider that keeps an account per payer the audit can read (the sandbox)."""

    def wallet(self, *, payer: str) -> WalletStatement | None:
        """The payer's account (balance, total charged, charges), or None if never charged.

        Read-only; the audit uses it. Raises ProviderOutcomeUnknown.
        """
        ...


@runtime_checkable
class TakesScriptedFaults(Protocol):
    """A stand-in provider whose next answers can be scripted (the sandbox's faults API).

    Nothing in the product needs it: the demo's story and chaos panel do. A real
    provider, or an emulator of one, has no such API; the demo asks for this
    capability and says why those features are not there, instead of calling it.
    """

    # Under the provider's base URL: POST scripts one fault, DELETE clears them all.
    faults_path: str
