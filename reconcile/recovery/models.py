"""Recovery's own table: captures of references we hold no attempt for.

``StrayCapture`` rows are found by the statement or named by a notification, and
refunded by ``reconcile.recovery.strays``; one per provider charge.
"""

from __future__ import annotations

from django.db import models

from payments.models import RefundAttemptStatus

# The provider a row belongs to when none is named: the one the shop ships with.
SANDBOX = "sandbox"


class StrayCapture(models.Model):
    """A capture the provider holds that no attempt of ours recorded: refunded.

    The shop writes its attempt before it asks the provider to charge, so a
    capture no attempt recorded is not ours to keep: a lost record, a charge
    made by hand in the provider's dashboard (``out_trade_no`` "": it names no
    reference), a second PaymentIntent naming the reference of an attempt that
    has its own capture. It has no order and no ledger entry; its
    refund reference and provider key are derived from the provider's charge
    and the attempt's number, so however often it is sent, the provider refunds
    it once. A declined refund is final at the provider for its reference: the
    next attempt (``refund_attempts`` + 1) takes a new one, once the
    reconciler's backoff from the decline is over (``next_refund_at``).
    """

    provider = models.CharField(max_length=32, default=SANDBOX)
    out_trade_no = models.CharField(max_length=64)
    trade_no = models.CharField(max_length=64)
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    refund_no = models.CharField(max_length=64, unique=True)
    refund_id = models.CharField(max_length=64, null=True, blank=True, unique=True)
    refund_status = models.CharField(
        max_length=16, choices=RefundAttemptStatus.choices, default=RefundAttemptStatus.PENDING
    )
    failure_code = models.CharField(max_length=64, blank=True, default="")
    # The refund attempt ``refund_no`` names (1, 2, ...): earlier ones were declined.
    refund_attempts = models.PositiveIntegerField(default=1)
    # A declined refund: the next attempt is not sent before this time.
    next_refund_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    refunded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            # Per charge, not per reference: two captures may name one reference (or none).
            models.UniqueConstraint(fields=["provider", "trade_no"], name="stray_once_per_charge"),
        ]

    def __str__(self) -> str:
        return f"{self.out_trade_no} {self.trade_no} ({self.refund_status})"


# The operator's desk lives in its own module; its models belong to this app.
