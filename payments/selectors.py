"""Reads of payments and refunds for the operators' gauges (docs/operating.md).

A scrape runs them every 15 seconds or so, and an unhealthy shop is exactly when
they must stay fast: unsettled attempts are read off their partial indexes
(``payment_unsettled_idx`` and its refund twin), which hold only the work left
to do; orphaned captures are few by nature (a provider settling late and
contrary) and read off the status.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Exists, OuterRef, QuerySet

from observability.selectors import count_and_age
from payments.models import (
    UNSETTLED_REFUND_STATUSES,
    UNSETTLED_STATUSES,
    Payment,
    PaymentStatus,
    Refund,
    RefundAttemptStatus,
)
from payments.services import provider_idempotency_key

if TYPE_CHECKING:
    from payments.providers.stripe import AttemptTerms


def payments_unresolved() -> tuple[float, float]:
    """Attempts PENDING or UNKNOWN: how many, and the oldest's age since created."""
    return count_and_age(Payment.objects.filter(status__in=UNSETTLED_STATUSES), "created_at")


def refunds_unresolved() -> tuple[float, float]:
    """Refund attempts PENDING or UNKNOWN (orphan refunds included): count, oldest age."""
    return count_and_age(Refund.objects.filter(status__in=UNSETTLED_REFUND_STATUSES), "created_at")


def orphaned_captures_unrefunded() -> tuple[float, float]:
    """Orphaned captures whose money is not back with the payer yet: count, and the age
    of the oldest since it was booked (its refund may be in flight or declined)."""
    refunded = Refund.objects.filter(
        payment=OuterRef("pk"), order__isnull=True, status=RefundAttemptStatus.SUCCEEDED
    )
    return count_and_age(
        Payment.objects.filter(status=PaymentStatus.ORPHANED).exclude(Exists(refunded)),
        "settled_at",
    )


def payments_awaiting_customer(*, in_flight_since: datetime) -> QuerySet[Payment]:
    """Attempts the provider holds for their customer (pay answered 202) that the
    reconciler does not fence before PAYMENT_ACTION_TIMEOUT_S: in flight, like any
    attempt younger than ``in_flight_since``, not findings."""
    waited_before = in_flight_since - timedelta(seconds=settings.PAYMENT_ACTION_TIMEOUT_S)
    return Payment.objects.filter(
        status__in=UNSETTLED_STATUSES,
        action_required_at__isnull=False,
        created_at__gte=waited_before,
    )


class RecordedReferences:
    """The provider ids the shop recorded, for a provider that cannot be asked by our
    reference (payments/providers/stripe.py): read from our tables, never theirs."""

    def payment_intent(self, out_trade_no: str) -> str | None:
        return (
            Payment.objects.filter(out_trade_no=out_trade_no)
            .values_list("trade_no", flat=True)
            .first()
        )

    def refund_charge(self, out_refund_no: str) -> str | None:
        return (
            Refund.objects.filter(refund_no=out_refund_no)
            .values_list("payment__out_trade_no", flat=True)
            .first()
        )

    def currency(self, out_trade_no: str) -> str | None:
        return (
            Payment.objects.filter(out_trade_no=out_trade_no)
            .values_list("currency", flat=True)
            .first()
        )

    def attempt(self, out_trade_no: str) -> AttemptTerms | None:
        from payments.providers.stripe import AttemptTerms

        payment = Payment.objects.filter(out_trade_no=out_trade_no).first()
        if payment is None:
            return None
        return AttemptTerms(
            amount=payment.amount,
            currency=payment.currency,
            idempotency_key=provider_idempotency_key(payment),
            created_at=payment.created_at,
        )
