"""Payment attempts and the ledger (the capture record)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class PaymentStatus(models.TextChoices):
    PENDING = "PENDING"  # created; the provider is being (or about to be) asked
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # declined, or fenced (closed) at the provider
    UNKNOWN = "UNKNOWN"  # the provider timed out or failed: reconcile, never guess


# A live attempt blocks another one on the same order (and blocks cancelling it).
LIVE_STATUSES = (PaymentStatus.PENDING, PaymentStatus.UNKNOWN, PaymentStatus.SUCCEEDED)
UNSETTLED_STATUSES = (PaymentStatus.PENDING, PaymentStatus.UNKNOWN)


class Payment(models.Model):
    """One attempt to charge an order at the provider.

    ``out_trade_no`` is our reference for the attempt, sent to the provider and
    unique; ``trade_no`` is the provider's id for the charge, unique once known.
    At most one attempt per order is *live* (pending, unknown or succeeded): a
    second pay of the same order finds the partial unique index in its way.
    """

    Status = PaymentStatus

    order = models.ForeignKey("orders.Order", on_delete=models.PROTECT, related_name="payments")
    out_trade_no = models.CharField(max_length=64, unique=True)
    # NULL until the provider names the charge (NULLs never collide on the unique index).
    trade_no = models.CharField(max_length=64, null=True, blank=True, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    payer = models.CharField(max_length=150)
    failure_code = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    # Reconciliation bookkeeping (reconcile/services/payments.py), never business
    # state. How many times the provider could not be reached about this attempt:
    # drives the exponential backoff.
    reconcile_attempts = models.PositiveIntegerField(default=0)
    # Not before this time: a reconciler's lease while it works on the attempt, or
    # the next try after the provider was unreachable. NULL: due as soon as it is old.
    next_reconcile_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["order"],
                condition=Q(status__in=LIVE_STATUSES),
                name="payment_one_live_attempt_per_order",
            ),
        ]
        indexes = [
            # The reconciler looks for unsettled attempts by age.
            models.Index(
                fields=["updated_at"],
                condition=Q(status__in=UNSETTLED_STATUSES),
                name="payment_unsettled_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.out_trade_no} ({self.status})"


class LedgerEntry(models.Model):
    """Money captured for an order: exactly one per PAID order, one per provider charge."""

    order = models.OneToOneField(
        "orders.Order", on_delete=models.PROTECT, related_name="ledger_entry"
    )
    payment = models.OneToOneField(Payment, on_delete=models.PROTECT, related_name="ledger_entry")
    trade_no = models.CharField(max_length=64, unique=True)
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"{self.trade_no}: {self.amount} {self.currency}"
