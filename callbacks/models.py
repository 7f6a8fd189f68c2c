"""Every notification the provider sent us, with what we made of it."""

from django.db import models


class ProviderNotification(models.Model):
    """One notification (by the provider's ``notify_id``), applied at most once.

    The row and its effect commit in one transaction, and ``notify_id`` is unique,
    so a redelivery finds the row and gets the stored answer back unchanged.
    """

    class Outcome(models.TextChoices):
        APPLIED = "applied"  # it settled the payment
        DUPLICATE = "duplicate"  # the payment was already settled the same way
        REJECTED = "rejected"  # amount or currency disagree with the attempt: not applied
        UNMATCHED = "unmatched"  # no attempt with this out_trade_no: for reconciliation
        DEFERRED = "deferred"  # would move a state backwards: for reconciliation

    provider = models.CharField(max_length=32, default="sandbox")
    notify_id = models.CharField(max_length=64)
    trade_no = models.CharField(max_length=64)
    out_trade_no = models.CharField(max_length=64)
    trade_status = models.CharField(max_length=16)
    amount = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    # Exactly the verified bytes, for disputes and for reconciliation by hand.
    raw_payload = models.TextField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    reason = models.TextField(blank=True, default="")
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    payment = models.ForeignKey(
        "payments.Payment",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="notifications",
    )
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["received_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "notify_id"], name="notification_unique_per_provider"
            ),
        ]
        indexes = [models.Index(fields=["out_trade_no"], name="notification_out_trade_no_idx")]

    def __str__(self) -> str:
        return f"{self.notify_id} ({self.outcome})"
