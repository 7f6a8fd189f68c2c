"""Errors of the sandbox provider's API (codes are part of its public contract).

The sandbox is another company: it declares its own classes rather than reuse
the shop's, and shares only the problem+json base and handler.
"""

from typing import Any

from django.utils.translation import gettext_noop

from edge.errors import ApplicationError


class MerchantUnauthorized(ApplicationError):
    """No ``Authorization: Bearer <key>`` header, or a key the sandbox does not know."""

    status = 401
    code = "merchant-unauthorized"
    title = gettext_noop("Merchant unauthorized")
    default_detail = "Send Authorization: Bearer <merchant key>."

    def __init__(self, detail: str | None = None, **extra: Any) -> None:
        super().__init__(detail, **extra)
        # RFC 9110: a 401 names the scheme the client should use.
        self.headers["WWW-Authenticate"] = 'Bearer realm="sandbox"'


class IdempotencyKeyMissing(ApplicationError):
    """A charge or refund was requested without an Idempotency-Key header."""

    code = "idempotency-key-missing"
    title = gettext_noop("Idempotency-Key required")
    default_detail = "Charges and refunds move money: send an Idempotency-Key header."


class IdempotencyKeyInvalid(ApplicationError):
    """The header is not 1-255 characters from A-Z a-z 0-9 - _ . : ~."""

    code = "idempotency-key-invalid"
    title = gettext_noop("Idempotency-Key malformed")
    default_detail = "The Idempotency-Key must be 1-255 characters from A-Z a-z 0-9 - _ . : ~."


class IdempotencyKeyMismatch(ApplicationError):
    """The key was used before with a different request body."""

    status = 422
    code = "idempotency-key-mismatch"
    title = gettext_noop("Idempotency-Key reused with a different request")
    default_detail = "This Idempotency-Key was already used for a different request."


class OutTradeNoMismatch(ApplicationError):
    """A charge for this ``out_trade_no`` exists with another amount, currency or payer."""

    status = 422
    code = "out-trade-no-mismatch"
    title = gettext_noop("out_trade_no reused with different terms")
    default_detail = (
        "A charge with this out_trade_no exists with a different amount, currency or payer."
    )


class OutRefundNoMismatch(ApplicationError):
    """A refund with this ``out_refund_no`` exists for another charge or amount."""

    status = 422
    code = "out-refund-no-mismatch"
    title = gettext_noop("out_refund_no reused with different terms")
    default_detail = (
        "A refund with this out_refund_no exists for a different out_trade_no or amount."
    )


class RefundNotFound(ApplicationError):
    """The provider holds no refund for this ``out_refund_no``."""

    status = 404
    code = "refund-not-found"
    title = gettext_noop("Refund not found")
    default_detail = "No refund exists for this out_refund_no."


class ClientSecretInvalid(ApplicationError):
    """The customer's action did not carry the charge's ``client_secret`` (or there is no
    charge waiting under that reference): nothing was done."""

    status = 403
    code = "client-secret-invalid"
    title = gettext_noop("Client secret invalid")
    default_detail = "This client_secret does not belong to a charge waiting for the customer."


class ChargeNotAwaitingAction(ApplicationError):
    """The charge is no longer waiting for the customer: completed, abandoned, or fenced
    (closed) by the merchant. The body carries it under ``charge``."""

    status = 409
    code = "charge-not-awaiting-action"
    title = gettext_noop("Charge not waiting for the customer")
    default_detail = "This charge no longer waits for the customer."


class DisputeNotFound(ApplicationError):
    """The provider holds no dispute of this id."""

    status = 404
    code = "dispute-not-found"
    title = gettext_noop("Dispute not found")
    default_detail = "No dispute exists with this id."


class ChargeNotFound(ApplicationError):
    """The provider holds no charge (not even a CLOSED fence) for this ``out_trade_no``."""

    status = 404
    code = "charge-not-found"
    title = gettext_noop("Charge not found")
    default_detail = "No charge exists for this out_trade_no."


class ChargeAlreadySucceeded(ApplicationError):
    """A close was asked for an attempt that has already been charged successfully.

    The problem body carries the charge (``trade_no``, ``trade_status``, ...; and
    the whole charge JSON under ``charge``) so the merchant can settle its side
    instead of failing the attempt.
    """

    status = 409
    code = "charge-already-succeeded"
    title = gettext_noop("Charge already succeeded")
    default_detail = "The charge for this out_trade_no succeeded; it cannot be closed."


class WalletNotFound(ApplicationError):
    """No charge was ever made for this payer, so the provider has no wallet for them."""

    status = 404
    code = "wallet-not-found"
    title = gettext_noop("Wallet not found")
    default_detail = "No wallet exists for this payer."


class ProviderError(ApplicationError):
    """A scripted failure (faults ``error_before_commit`` / ``error_after_commit``).

    From outside it looks like any provider 5xx: the caller cannot know whether
    the charge happened, and must find out (retry with the same key, or query).
    """

    status = 500
    code = "provider-error"
    title = gettext_noop("Provider error")
    default_detail = (
        "The provider failed to answer; the charge or refund may or may not have happened."
    )


class StatementDateInvalid(ApplicationError):
    """The statement's day is not a calendar date written ``YYYY-MM-DD``."""

    code = "statement-date-invalid"
    title = "Statement date invalid"
    default_detail = "Ask for a day's statement as /v1/statements/YYYY-MM-DD (a UTC day)."
