"""Payment provider adapters. Forking to a real provider = one new module here."""

import os
import threading

from django.conf import settings

from payments.providers.base import (
    ChargeResult,
    ChargeStatus,
    Notification,
    NotificationInvalid,
    NotificationMalformed,
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

__all__ = [
    "ChargeResult",
    "ChargeStatus",
    "Notification",
    "NotificationInvalid",
    "NotificationMalformed",
    "NotificationSignatureInvalid",
    "PaymentProvider",
    "ProviderAnswerConflict",
    "ProviderOutcomeUnknown",
    "ProviderRejected",
    "RefundNotification",
    "RefundResult",
    "RefundStatus",
    "StatementEntry",
    "StatementKind",
    "StatementMalformed",
    "WalletStatement",
    "get_provider",
]


def get_provider() -> PaymentProvider:
    """The provider the shop is configured for (only the sandbox ships).

    One per process and configuration, so its HTTP connections stay open from one
    call to the next (payments/providers/http.py). Keyed on the process id too: a
    forked worker must never share its parent's sockets.
    """
    from payments.providers.sandbox import SandboxProvider

    key = (
        os.getpid(),
        settings.PROVIDER_BASE_URL,
        settings.PROVIDER_API_KEY,
        settings.PROVIDER_TIMEOUT_S,
        settings.SANDBOX_WEBHOOK_SECRET,
        settings.RECONCILE_CONCURRENCY,
    )
    with _providers_lock:
        provider = _providers.get(key)
        if provider is None:
            provider = _providers[key] = SandboxProvider.from_settings()
    return provider


# Tests change the settings; each configuration gets its own client (a handful).
_providers: dict[tuple[object, ...], PaymentProvider] = {}
_providers_lock = threading.Lock()
