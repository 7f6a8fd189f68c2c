"""The payer's money at the provider."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q


class Wallet(models.Model):
    """The payer's money at the provider: one per payer, created on first charge."""

    payer = models.CharField(max_length=150)
    # Moved only by conditional UPDATEs (services.wallets): the CHECK makes an
    # overdraft impossible even if a bug tried.
    balance = models.BigIntegerField()
    # Sums of the successful charges and refunds, kept in the same UPDATE as the
    # money, so the audit can compare the net debit (charged - refunded) with the
    # shop's books without adding up rows.
    charged_total = models.BigIntegerField(default=0)
    refunded_total = models.BigIntegerField(default=0)
    # What disputes gave back to the payer (withdrawn from the merchant, less what a
    # dispute won reinstated): net debit = charged - refunded - disputed.
    disputed_total = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["payer"]
        constraints = [
            # What makes get-or-create race-safe (INSERT ... ON CONFLICT DO NOTHING).
            models.UniqueConstraint(fields=["payer"], name="sandbox_wallet_payer_unique"),
            models.CheckConstraint(
                condition=Q(balance__gte=0), name="sandbox_wallet_balance_gte_0"
            ),
            models.CheckConstraint(
                condition=Q(charged_total__gte=0), name="sandbox_wallet_charged_total_gte_0"
            ),
            # A payer can never get back more than they paid.
            models.CheckConstraint(
                condition=Q(refunded_total__gte=0, refunded_total__lte=F("charged_total")),
                name="sandbox_wallet_refunded_within_charged",
            ),
            models.CheckConstraint(
                condition=Q(
                    disputed_total__gte=0,
                    disputed_total__lte=F("charged_total") - F("refunded_total"),
                ),
                name="sandbox_wallet_disputed_within_charged",
            ),
        ]

    def __str__(self) -> str:
        return self.payer
