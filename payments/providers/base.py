"""What the shop needs from any payment provider: a small protocol and its values."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


class ChargeStatus(enum.StrEnum):
    SUCCESS = "SUCCESS"
    DECLINED = "DECLINED"
    CLOSED = "CLOSED"  # fenced: no charge for this attempt can succeed any more


@dataclass(frozen=True)
class ChargeResult:
    """The provider's account of one attempt (by our ``out_trade_no``)."""

    out_trade_no: str
    status: ChargeStatus
    trade_no: str | None
    amount: int | None
    currency: str | None
    paid_at: datetime | None = None
    decline_reason: str | None = None


class RefundStatus(enum.StrEnum):
    SUCCESS = "SUCCESS"
    DECLINED = "DECLINED"


@dataclass(frozen=True)
class RefundResult:
    """The provider's account of one refund attempt (by our ``out_refund_no``)."""

    out_refund_no: str
    out_trade_no: str
    status: RefundStatus
    refund_id: str | None
    amount: int | None
    currency: str | None
    refunded_at: datetime | None = None
    decline_reason: str | None = None


@dataclass(frozen=True)
class RefundNotification:
    """A verified refund notification: the provider says this refund settled like this."""

    notify_id: str
    refund_id: str
    out_refund_no: str
    out_trade_no: str
    status: RefundStatus
    amount: int
    currency: str
    refunded_at: datetime | None


@dataclass(frozen=True)
class WalletStatement:
    """The provider's account of one payer: what the audit compares our books with."""

    payer: str
    balance: int
    charged_total: int  # the sum of the payer's successful charges, as the provider keeps it
    charges: tuple[ChargeResult, ...]
    refunded_total: int = 0  # the sum of the payer's successful refunds


@dataclass(frozen=True)
class Notification:
    """A verified notification: the provider says this attempt settled like this."""

    notify_id: str
    trade_no: str
    out_trade_no: str
    trade_status: ChargeStatus
    amount: int
    currency: str
    paid_at: datetime | None


class ProviderOutcomeUnknown(Exception):
    """We cannot tell whether the provider charged: timeout, 5xx, or an answer we
    do not understand. Never treated as success or failure; reconcile instead."""


class ProviderAnswerConflict(ProviderOutcomeUnknown):
    """The provider answered about another reference than the one we asked about."""


class NotificationInvalid(Exception):
    """A notification we must not act on."""


class NotificationSignatureInvalid(NotificationInvalid):
    """Missing, forged or stale signature: the sender is not the provider (or not now)."""


class NotificationMalformed(NotificationInvalid):
    """Signed by the provider, but not a body we can read."""


class PaymentProvider(Protocol):
    """The five things the shop asks of a provider."""

    def charge(
        self,
        *,
        out_trade_no: str,
        amount: int,
        currency: str,
        payer: str,
        notify_url: str,
        idempotency_key: str,
    ) -> ChargeResult:
        """Charge once per ``idempotency_key``; a retry replays. Raises ProviderOutcomeUnknown."""
        ...

    def query(self, *, out_trade_no: str) -> ChargeResult | None:
        """The truth about an attempt, or None if the provider never saw it."""
        ...

    def close(self, *, out_trade_no: str) -> ChargeResult:
        """Fence the attempt: afterwards it can never succeed. Returns what it became."""
        ...

    def wallet(self, *, payer: str) -> WalletStatement | None:
        """The payer's account (balance, total charged, charges), or None if never charged.

        Read-only; the audit uses it. Raises ProviderOutcomeUnknown.
        """
        ...

    def refund(
        self,
        *,
        out_refund_no: str,
        out_trade_no: str,
        amount: int,
        notify_url: str,
        idempotency_key: str,
    ) -> RefundResult:
        """Refund once per ``idempotency_key``; a retry replays. Raises ProviderOutcomeUnknown."""
        ...

    def query_refund(self, *, out_refund_no: str) -> RefundResult | None:
        """The truth about a refund attempt, or None if the provider never saw it."""
        ...

    def verify_notification(
        self, *, headers: Mapping[str, str], raw_body: bytes
    ) -> Notification | RefundNotification:
        """Check the signature over the raw body, then parse. Raises NotificationInvalid."""
        ...
