"""What the shop needs from any payment provider: a small protocol and its values.

The contract every adapter must honour (idempotent create on our reference, a
query that is the truth, a fence, answers that name what was asked about), and
how Stripe, Alipay and WeChat Pay map onto it, is in ``CONTRACT.md`` next to
this file.

Exceptions, and what the flows may conclude from each:

- ``ProviderOutcomeUnknown``: a timeout, a 5xx, a 408/409/422/429 on a call
  that moves money (not now; the same key is in flight; this key or reference
  already holds a charge or refund with other terms), or an answer we cannot
  read. Money may or may not have moved: never treated as success or failure;
  retry with the same key, or query.
- ``CustomerActionRequired`` (a ``ProviderOutcomeUnknown``): the provider waits
  for the customer to act (3-D Secure). Nothing moved yet; the pay answers 202
  with what the client needs, and the reconciler fences the attempt once it has
  waited ``PAYMENT_ACTION_TIMEOUT_S``.
- ``ProviderAnswerConflict`` (a ``ProviderOutcomeUnknown``): an answer that
  reads fine but is about another reference than the one we asked about. Never
  applied: it proves nothing about our attempt.
- ``ProviderRejected(status, code)``: any other 4xx on a call that moves money,
  carrying the provider's own error code (a body that fails validation, a
  charge the provider does not know, a credential it does not accept). Such a
  request is refused before anything moves, so it proves that this request
  moved nothing. Whether that makes the attempt final is the flow's decision.
  A 4xx without the provider's code (a proxy's page) proves nothing: unknown.
  A 404 on a read (``query``, ``query_refund``, ``wallet``) is not a rejection:
  it means "no such thing" and is answered as ``None``; a 409 on ``close`` is
  the charge that already succeeded, answered as that charge.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Protocol


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
    DECLINED = "DECLINED"  # final: nothing was refunded for this out_refund_no
    # It succeeded, then failed on its way to the payer (a closed card): the money came
    # back to the merchant, and the payer still awaits it. Final.
    REVERSED = "REVERSED"


@dataclass(frozen=True)
class RefundResult:
    """The provider's account of one refund (by our ``out_refund_no``).

    ``currency`` is None only for a declined refund of a charge whose terms the
    provider never knew (an attempt fenced before any charge).
    """

    out_refund_no: str
    out_trade_no: str
    status: RefundStatus
    refund_id: str | None
    amount: int | None
    currency: str | None
    refunded_at: datetime | None = None
    decline_reason: str | None = None


class DisputeStatus(enum.StrEnum):
    OPEN = "OPEN"  # the payer's bank disputes the charge; the provider took the money back
    WON = "WON"  # closed in the merchant's favour: what was withdrawn is reinstated
    LOST = "LOST"  # closed in the payer's favour: the money stays with the payer


@dataclass(frozen=True)
class DisputeResult:
    """The provider's account of one dispute (a chargeback) of a charge.

    ``withdrawn`` is what the provider took from the merchant for it so far,
    ``reinstated`` what it gave back (a dispute won); both in minor units of
    ``currency``, never negative.
    """

    dispute_id: str
    trade_no: str  # the disputed charge (the provider's id, as the shop keeps it)
    out_trade_no: str  # the reference the charge names ("" when it names none of ours)
    status: DisputeStatus
    amount: int
    currency: str
    withdrawn: int
    reinstated: int
    opened_at: datetime | None = None
    reason: str = ""


@dataclass(frozen=True)
class WalletStatement:
    """The provider's account of one payer: what the audit compares our books with."""

    payer: str
    balance: int
    charged_total: int  # the sum of the payer's successful charges, as the provider keeps it
    charges: tuple[ChargeResult, ...]
    # The sum of the payer's successful refunds (a reversed one no longer counts).
    refunded_total: int
    refunds: tuple[RefundResult, ...] = ()
    # Withdrawn by disputes less what was reinstated: what chargebacks gave back.
    # Net debit = charged - refunded - disputed.
    disputed_total: int = 0
    disputes: tuple[DisputeResult, ...] = ()


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


@dataclass(frozen=True)
class DisputeNotification:
    """A verified dispute notification: the provider says a dispute of this charge is
    now like this (opened, funds withdrawn or reinstated, won or lost)."""

    notify_id: str
    dispute: DisputeResult

    @property
    def out_trade_no(self) -> str:
        return self.dispute.out_trade_no


@dataclass(frozen=True)
class RefundNotification:
    """A verified refund notification: the provider says this refund settled like this."""

    notify_id: str
    refund_id: str
    out_refund_no: str
    out_trade_no: str
    status: RefundStatus
    amount: int
    currency: str | None
    refunded_at: datetime | None


class StatementKind(enum.StrEnum):
    CHARGE = "charge"
    REFUND = "refund"
    # A refund that failed after it succeeded: its money came back to the merchant.
    REFUND_FAILURE = "refund_failure"
    # A dispute took a charge's money back to the payer, or gave it back to us (won).
    DISPUTE_WITHDRAWAL = "dispute_withdrawal"
    DISPUTE_REINSTATEMENT = "dispute_reinstatement"
    # Money that moved for the merchant's own account, not for a payment of ours:
    # payouts to the bank, the provider's fees, top-ups, transfers.
    OTHER = "other"


@dataclass(frozen=True)
class StatementEntry:
    """One line of the provider's daily statement: money that moved that day.

    ``provider_id`` is the provider's id (a charge's ``trade_no``, a refund's
    ``refund_id`` for a refund or its failure, a dispute's id for its withdrawal
    or reinstatement, the transaction's own id for anything else); ``reference``
    is ours (``out_trade_no`` / ``out_refund_no``; a dispute's line names the
    charge's ``out_trade_no``), or for an ``other`` line the provider's name for
    what it is (``payout``, ``stripe_fee``). ``amount`` is always positive: the
    kind says which way it went. ``line`` is its line number in the file (the
    header is line 1).
    """

    line: int
    kind: StatementKind
    provider_id: str
    reference: str
    amount: int
    currency: str
    status: str
    settled_at: datetime


class StatementMalformed(Exception):
    """The statement cannot be read as the provider's format (names the line and why).

    Not an outcome-unknown: downloading it again gets the same bytes. Nothing of
    such a statement is imported; a person (or the provider) has to look.
    """


class ProviderOutcomeUnknown(Exception):
    """We cannot tell whether the provider moved money: timeout, 5xx, or an answer we
    do not understand. Never treated as success or failure; reconcile instead."""


class CustomerActionRequired(ProviderOutcomeUnknown):
    """The provider waits for the customer (3-D Secure, a redirect): nothing has moved
    yet, and the attempt may still succeed, be declined, or be fenced.

    An outcome-unknown, so every path that does not look for it treats the attempt
    as unsettled and decides nothing. ``action`` is what the customer's client
    needs to finish it, as the provider gives it: ``client_secret`` and
    ``next_action`` (Stripe's names; the sandbox answers the same two).
    """

    def __init__(self, *, out_trade_no: str, action: Mapping[str, Any]) -> None:
        super().__init__(f"{out_trade_no} waits for the customer to act (requires_action)")
        self.out_trade_no = out_trade_no
        self.action = dict(action)


class ProviderAnswerConflict(ProviderOutcomeUnknown):
    """The provider answered about another reference than the one we asked about.

    A well-formed answer naming another ``out_trade_no`` (charge, query, close) or
    another ``out_refund_no`` (refund, query_refund) says nothing about ours: it is
    never applied, and what became of ours is as unknown as after a timeout.
    """


class ProviderRejected(Exception):
    """The provider refused a money-moving request with a 4xx: nothing moved for it.

    ``status`` is the HTTP status, ``code`` the provider's error code. Not an
    outcome-unknown: retrying the same request gets the same refusal. Which 4xx
    count (and which do not: 404 on reads, 409 on close, 408/409/422/429 on
    money-moving calls) is in the module docstring.
    """

    def __init__(self, status: int, code: str) -> None:
        super().__init__(f"provider rejected the request: HTTP {status} {code}")
        self.status = status
        self.code = code


class NotificationInvalid(Exception):
    """A notification we must not act on."""


class NotificationSignatureInvalid(NotificationInvalid):
    """Missing, forged or stale signature: the sender is not the provider (or not now)."""


class NotificationMalformed(NotificationInvalid):
    """Signed by the provider, but not a body we can read."""


class NotificationNotApplied(NotificationInvalid):
    """Signed by the provider and readable, but of a kind the shop does not apply (or
    about nothing of ours): stored and acknowledged, so the provider stops sending it."""

    def __init__(self, notify_id: str, kind: str) -> None:
        super().__init__(f"{kind} {notify_id} is not a notification the shop applies")
        self.notify_id = notify_id
        self.kind = kind


class PaymentProvider(Protocol):
    """The eight things the shop asks of any provider, and what it is called.

    ``name`` is the provider's name in the shop's records (notifications are
    unique per provider); ``callback_route`` is the URL name of the endpoint its
    notifications come to. What only some providers do is a capability below
    (``PreparesCharges``, ``KeepsWallets``, in ``capabilities``): the flows, the reconciler and the
    audit ask for the capability, never for a provider by name.
    """

    name: str
    callback_route: str

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
        """Charge once per ``idempotency_key``; a retry replays.

        Raises ProviderRejected (refused, nothing charged by this request) or
        ProviderOutcomeUnknown.
        """
        ...

    def query(self, *, out_trade_no: str, trade_no: str | None = None) -> ChargeResult | None:
        """The truth about an attempt, or None if the provider never saw it.

        ``trade_no``: the provider's id of one charge, when the caller holds one (a
        statement line, a notification): the answer is about that charge, whether or
        not the shop recorded it, and it must name ``out_trade_no`` ("" for a charge
        that names no reference of ours).

        Raises ProviderOutcomeUnknown (ProviderAnswerConflict: about another attempt).
        """
        ...

    def close(self, *, out_trade_no: str) -> ChargeResult:
        """Fence the attempt: afterwards it can never succeed. Returns what it became.

        Raises ProviderOutcomeUnknown (ProviderAnswerConflict: about another attempt).
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
        trade_no: str | None = None,
    ) -> RefundResult:
        """Refund once per ``idempotency_key`` and per ``out_refund_no``; a retry replays.

        ``trade_no``: the provider's id of the charge to refund, when the shop holds no
        attempt that recorded it (a stray capture).

        Raises ProviderOutcomeUnknown (timeout, 5xx, garbage, another out_refund_no:
        ProviderAnswerConflict) or ProviderRejected (a 4xx: nothing refunded).
        """
        ...

    def query_refund(
        self, *, out_refund_no: str, trade_no: str | None = None
    ) -> RefundResult | None:
        """The truth about a refund, or None if the provider never saw it.

        ``trade_no``: the refunded charge's id at the provider, as for ``refund``.
        """
        ...

    def query_dispute(self, *, dispute_id: str) -> DisputeResult | None:
        """The truth about a dispute of one of the merchant's charges, or None if the
        provider holds none of that id. Raises ProviderOutcomeUnknown."""
        ...

    def statement(self, *, day: date) -> Iterator[StatementEntry]:
        """The day's statement (UTC), line by line as it downloads, never whole in memory.

        Raises ProviderOutcomeUnknown (no answer, or the download broke off) or
        StatementMalformed (a line we cannot read), possibly after some lines.
        """
        ...

    def verify_notification(
        self, *, headers: Mapping[str, str], raw_body: bytes
    ) -> Notification | RefundNotification | DisputeNotification:
        """Check the signature over the raw body, then parse. Raises NotificationInvalid."""
        ...
