"""Every notification the provider sent us, with what we made of it."""

from django.db import models
from django.db.models import Q

# The outcomes that leave something for reconciliation (see ``resolved_at``).
UNRESOLVED_OUTCOMES = ("deferred", "rejected", "unmatched")
# One row per notification the provider sends: a redelivery's INSERT fails on it.
NOTIFY_ID_UNIQUE = "notification_unique_per_provider"


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
        IGNORED = "ignored"  # verified, of a kind the shop does not apply: stored, acknowledged

    class Event(models.TextChoices):
        CHARGE = "charge"
        REFUND = "refund"
        DISPUTE = "dispute"  # a dispute of a charge (trade_no) opened, moved money or closed
        OTHER = "other"  # any other verified event (its type is in trade_status)

    provider = models.CharField(max_length=32, default="sandbox")
    notify_id = models.CharField(max_length=64)
    event = models.CharField(max_length=8, choices=Event.choices, default=Event.CHARGE)
    trade_no = models.CharField(max_length=64, blank=True, default="")  # charges only
    out_trade_no = models.CharField(max_length=64)
    # Refund notifications: our reference and the provider's id for the refund.
    out_refund_no = models.CharField(max_length=64, blank=True, default="")
    refund_id = models.CharField(max_length=64, blank=True, default="")
    # Dispute notifications: the provider's id for the dispute (its status in trade_status).
    dispute_id = models.CharField(max_length=64, blank=True, default="")
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
    refund_attempt = models.ForeignKey(
        "payments.Refund",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="notifications",
    )
    received_at = models.DateTimeField(auto_now_add=True)
    # What the shop could not apply at once (deferred, rejected, unmatched) is
    # settled later by the reconciler asking the provider; then it is resolved.
    # The audit reports every such notification left unresolved.
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["received_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["provider", "notify_id"], name=NOTIFY_ID_UNIQUE),
        ]
        indexes = [
            models.Index(fields=["out_trade_no"], name="notification_out_trade_no_idx"),
            # The reconciler's and the audit's work list: small, whatever the history.
            models.Index(
                fields=["received_at"],
                condition=Q(outcome__in=UNRESOLVED_OUTCOMES, resolved_at__isnull=True),
                name="notification_unresolved_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.notify_id} ({self.outcome})"
