"""Payment provider adapters. Forking to a real provider = one new module here."""

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
    """The provider the shop is configured for (only the sandbox ships)."""
    from payments.providers.sandbox import SandboxProvider

    return SandboxProvider.from_settings()
