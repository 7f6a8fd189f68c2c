"""Errors of the pay flow (codes are part of the public contract)."""

from typing import Any

from django.utils.translation import gettext_noop

from edge.errors import ApplicationError
from orders.errors import OrderKeyReused


class OrderNotPayable(ApplicationError):
    """The order is paid, cancelled, or has a payment attempt in progress."""

    status = 409
    code = "order-not-payable"
    title = gettext_noop("Order not payable")
    default_detail = "This order cannot be paid now."
    final = True


class PaymentDeclined(ApplicationError):
    """The provider declined the charge. Pay again with a new key to retry."""

    status = 402
    code = "payment-declined"
    title = gettext_noop("Payment declined")
    default_detail = "The payment was declined; the order can be paid again with a new key."
    final = True


class PaymentFailed(ApplicationError):
    """Reconciliation found no charge and fenced the attempt at the provider."""

    status = 402
    code = "payment-failed"
    title = gettext_noop("Payment failed")
    default_detail = (
        "The payment did not go through and was closed at the provider; "
        "the order can be paid again with a new key."
    )
    final = True


class PaymentActionRequired(ApplicationError):
    """The provider waits for the customer (3-D Secure, a redirect).

    Not final: nothing is stored, the key keeps its recovery point, and the same
    key asks the provider again (202 again until the attempt settles, then the
    settled answer, stored). ``action`` is what the client needs to finish it.
    """

    status = 202
    code = "payment-action-required"
    title = gettext_noop("Payment action required")
    default_detail = (
        "The payment provider is waiting for you to confirm this payment (for example "
        "with your bank). Finish it with the action below, then send the same request "
        "again with the same Idempotency-Key."
    )


class _OutcomeUnknown(ApplicationError):
    """The provider did not answer in time: not final, nothing stored, retry later."""

    status = 503

    def __init__(self, detail: str | None = None, **extra: Any) -> None:
        super().__init__(detail, **extra)
        # Long enough for a provider hiccup to pass; the reconciler resolves the
        # attempt after RECONCILE_AFTER_S even if the client never comes back.
        self.headers["Retry-After"] = "2"


class PaymentOutcomeUnknown(_OutcomeUnknown):
    """The provider timed out or failed: we do not know yet whether it charged.

    Not final: nothing is stored, the key keeps its recovery point, and a retry
    with the SAME key asks the provider before charging (never charges twice).
    """

    code = "payment-outcome-unknown"
    title = gettext_noop("Payment outcome unknown")
    default_detail = (
        "The payment provider did not answer in time; we do not know yet whether you "
        "were charged. Retry with the same Idempotency-Key: you will not be charged twice."
    )


# --- Refunds ---------------------------------------------------------------------


class OrderNotRefundable(ApplicationError):
    """The order is not PAID (unpaid, cancelled, refunded), or a refund of it is in flight."""

    status = 409
    code = "order-not-refundable"
    title = gettext_noop("Order not refundable")
    default_detail = "This order cannot be refunded now."
    final = True


class RefundExceedsPaid(ApplicationError):
    """More than what is left to refund (``amount - refunded_amount``) was asked for."""

    status = 409
    code = "refund-exceeds-paid"
    title = gettext_noop("Refund exceeds what was paid")
    default_detail = "The refund is larger than what is left to refund of this order."
    final = True


class RefundKeyReused(OrderKeyReused):
    """The key already started a refund of this order, and its record has been reaped.

    The same code as order creation's: after the retention window the unique
    (order, key) index on refund attempts still refuses a second refund.
    """

    default_detail = (
        "This Idempotency-Key already started a refund of this order and its record has "
        "expired; use a new key for a new refund."
    )


class RefundDeclined(ApplicationError):
    """The provider declined the refund. Stored: refund again with a new key to retry."""

    status = 402
    code = "refund-declined"
    title = gettext_noop("Refund declined")
    default_detail = "The provider declined the refund; nothing was given back."
    final = True


class RefundOutcomeUnknown(_OutcomeUnknown):
    """The provider timed out or failed: we do not know yet whether it refunded.

    Not final: nothing is stored, the key keeps its recovery point, and a retry
    with the SAME key asks the provider first (never refunds twice).
    """

    code = "refund-outcome-unknown"
    title = gettext_noop("Refund outcome unknown")
    default_detail = (
        "The payment provider did not answer in time; we do not know yet whether the "
        "refund went through. Retry with the same Idempotency-Key: it is never made twice."
    )
