"""What the provider answered and what it sends: idempotency records, notifications."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from demo.sandbox.models.charges import Charge, Refund
from demo.sandbox.models.disputes import Dispute

# What an idempotency record is about: a charge or a refund, never both.
_ONE_SUBJECT = Q(charge__isnull=False, refund__isnull=True) | Q(
    charge__isnull=True, refund__isnull=False
)
# What a notification is about: a charge, a refund or a dispute, exactly one.
_ONE_NOTIFIED = (
    Q(charge__isnull=False, refund__isnull=True, dispute__isnull=True)
    | Q(charge__isnull=True, refund__isnull=False, dispute__isnull=True)
    | Q(charge__isnull=True, refund__isnull=True, dispute__isnull=False)
)


class IdempotencyRecord(models.Model):
    """What the provider answered to one Idempotency-Key.

    Inserted in the same transaction as the charge (or refund) and its money: if
    that committed, so did this row, and a retry after any later failure (a 5xx,
    a timeout, a dropped connection) replays the true result. Keys are global,
    one namespace for charges and refunds (a key used for one and then for the
    other is a mismatch): the sandbox serves a single merchant. Kept forever: a
    demo provider has no retention window to teach.
    """

    key = models.CharField(max_length=255)
    # SHA-256 of the canonical request body: the same key with other terms is a
    # client bug (422), never a replay of a different charge.
    fingerprint = models.CharField(max_length=64)
    charge = models.ForeignKey(
        Charge, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    refund = models.ForeignKey(
        Refund, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key"], name="sandbox_idempotency_key_unique"),
            models.CheckConstraint(condition=_ONE_SUBJECT, name="sandbox_idempotency_one_subject"),
        ]

    def __str__(self) -> str:
        return self.key


class Notification(models.Model):
    """One copy of an outgoing notification (provider -> merchant callback) about
    a settled charge or refund, or a dispute that opened or closed.

    Copies made by the ``callback_duplicates`` fault share ``notify_id``: that is
    what a real provider resending the same notification looks like, and what
    the merchant dedupes on.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    notify_id = models.CharField(max_length=32)
    copy = models.PositiveSmallIntegerField(default=1)
    charge = models.ForeignKey(
        Charge, on_delete=models.PROTECT, null=True, blank=True, related_name="notifications"
    )
    refund = models.ForeignKey(
        Refund, on_delete=models.PROTECT, null=True, blank=True, related_name="notifications"
    )
    dispute = models.ForeignKey(
        Dispute, on_delete=models.PROTECT, null=True, blank=True, related_name="notifications"
    )
    # The exact body every attempt sends (re-signed per attempt, same bytes).
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    # Countdown of the first delivery: non-zero and random under ``callback_shuffle``.
    first_delay_s = models.FloatField(default=0.0)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["notify_id", "copy"], name="sandbox_notification_one_row_per_copy"
            ),
            models.CheckConstraint(
                condition=_ONE_NOTIFIED, name="sandbox_notification_one_subject_of_three"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.notify_id}#{self.copy} {self.status}"

    @property
    def notify_url(self) -> str:
        subject: Charge | Refund | None = self.charge or self.refund
        if self.dispute is not None:
            subject = self.dispute.charge
        return (subject.notify_url if subject is not None else None) or ""
