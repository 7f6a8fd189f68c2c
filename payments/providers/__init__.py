"""Payment provider adapters. Forking to a real provider = one new module here."""

import os
import threading

from django.conf import settings

from payments.providers.base import (
    ChargeResult,
    ChargeStatus,
    CustomerActionRequired,
    DisputeNotification,
    DisputeResult,
    DisputeStatus,
    Notification,
    NotificationInvalid,
    NotificationMalformed,
    NotificationNotApplied,
    NotificationSignatureInvalid,
    PaymentProvider,
    ProviderAnswerConflict,
    ProviderOutcomeUnknown,
    ProviderRejected,
    RefundNotification,
    RefundResult,
    RefundStatus,
    StatementEntry,
    StatementKind,
    StatementMalformed,
    WalletStatement,
)
from payments.providers.capabilities import KeepsWallets, PreparesCharges, TakesScriptedFaults

__all__ = [
    "ChargeResult",
    "ChargeStatus",
    "CustomerActionRequired",
    "DisputeNotification",
    "DisputeResult",
    "DisputeStatus",
    "KeepsWallets",
    "Notification",
    "NotificationInvalid",
    "NotificationMalformed",
    "NotificationNotApplied",
    "NotificationSignatureInvalid",
    "PaymentProvider",
    "PreparesCharges",
    "ProviderAnswerConflict",
    "ProviderOutcomeUnknown",
    "ProviderRejected",
    "RefundNotification",
    "RefundResult",
    "RefundStatus",
    "StatementEntry",
    "StatementKind",
    "StatementMalformed",
    "TakesScriptedFaults",
    "WalletStatement",
    "get_provider",
]


def get_provider() -> PaymentProvider:
    """The provider the shop is configured for (``PAYMENT_PROVIDER``: sandbox or stripe).

    One per process and configuration, so its HTTP connections stay open from one
    call to the next (payments/providers/http.py). Keyed on the process id too: a
    forked worker must never share its parent's sockets.
    """
    key: tuple[object, ...]
    if settings.PAYMENT_PROVIDER == "stripe":
        key = (
            os.getpid(),
            "stripe",
            settings.STRIPE_API_BASE,
            settings.STRIPE_API_KEY,
            settings.STRIPE_WEBHOOK_SECRET,
            settings.PROVIDER_TIMEOUT_S,
        )
    else:
        key = (
            os.getpid(),
            "sandbox",
            settings.PROVIDER_BASE_URL,
            settings.PROVIDER_API_KEY,
            settings.PROVIDER_TIMEOUT_S,
            settings.SANDBOX_WEBHOOK_SECRET,
            settings.RECONCILE_CONCURRENCY,
        )
    with _providers_lock:
        provider = _providers.get(key)
        if provider is None:
            provider = _providers[key] = _make(settings.PAYMENT_PROVIDER)
    return provider


def _make(name: str) -> PaymentProvider:
    if name == "stripe":
        from payments.providers.stripe import StripeProvider
        from payments.selectors import RecordedReferences

        return StripeProvider.from_settings(RecordedReferences())
    from payments.providers.sandbox import SandboxProvider

    return SandboxProvider.from_settings()


# Tests change the settings; each configuration gets its own client (a handful).
_providers: dict[tuple[object, ...], PaymentProvider] = {}
_providers_lock = threading.Lock()
