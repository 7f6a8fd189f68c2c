"""Disputes (chargebacks): a payer's bank takes a charge's money back."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from demo.sandbox.models.charges import Charge


class Dispute(models.Model):
    """A dispute of one SUCCESS charge, opened by the ``dispute_lost`` fault.

    Opened OPEN with the money withdrawn from the merchant and given back to the
    payer (the wallet credited), then closed once: LOST keeps it with the payer,
    WON would reinstate it to the merchant. ``closes_at`` is when the scheduled
    close is due (cleared when it runs). One per charge.
    """

    class Status(models.TextChoices):
        OPEN = "OPEN"
        WON = "WON"
        LOST = "LOST"

    dispute_id = models.CharField(max_length=32)
    charge = models.OneToOneField(Charge, on_delete=models.PROTECT, related_name="dispute")
    status = models.CharField(max_length=8, choices=Status.choices)
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    reason = models.CharField(max_length=32)
    opened_at = models.DateTimeField()
    closes_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["opened_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["dispute_id"], name="sandbox_dispute_id_unique"),
            models.CheckConstraint(condition=Q(amount__gt=0), name="sandbox_dispute_amount_gt_0"),
            models.CheckConstraint(
                condition=Q(status="OPEN", closed_at__isnull=True)
                | (~Q(status="OPEN") & Q(closed_at__isnull=False, closes_at__isnull=True)),
                name="sandbox_dispute_closed_at_iff_closed",
            ),
        ]
        indexes = [
            # The daily statement reads a day's disputes by when they opened or closed.
            models.Index(fields=["opened_at", "id"], name="sandbox_dispute_opened_idx"),
            models.Index(
                fields=["closed_at", "id"],
                condition=Q(status="WON"),
                name="sandbox_dispute_won_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.dispute_id} {self.status}"

    @property
    def withdrawn(self) -> int:
        """What the dispute took from the merchant (all of it, when it opened)."""
        return int(self.amount)

    @property
    def reinstated(self) -> int:
        """What it gave back to the merchant: all of it if won, else nothing."""
        return int(self.amount) if self.status == self.Status.WON else 0
