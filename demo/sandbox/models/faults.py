"""Scripted misbehaviour of the provider (the demo's chaos)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class Fault(models.Model):
    """A scripted misbehaviour for the next ``remaining`` new charges (or refunds).

    One row per (mode, target), each with its own counter, so modes stack. A
    charge fault is consumed only by a new charge, a refund fault only by a new
    refund. ``remaining`` is decremented by a conditional UPDATE only
    (services.faults.fault_take_for).
    """

    class Mode(models.TextChoices):
        DECLINE = "decline"
        ERROR_BEFORE_COMMIT = "error_before_commit"
        ERROR_AFTER_COMMIT = "error_after_commit"
        TIMEOUT_AFTER_COMMIT = "timeout_after_commit"
        CALLBACK_DUPLICATES = "callback_duplicates"
        CALLBACK_SHUFFLE = "callback_shuffle"
        CALLBACK_DROP = "callback_drop"
        LATE_SUCCESS = "late_success"
        # The charge waits for the customer (3-D Secure): completed or abandoned
        # through POST /sandbox/v1/charges/{out_trade_no}/action, or fenced by a close.
        REQUIRES_ACTION = "requires_action"
        # A refund that succeeds now and fails after delay_s (a closed card).
        REFUND_REVERSAL = "refund_reversal"
        # A charge that succeeds now, is disputed after delay_s, and lost after as long.
        DISPUTE_LOST = "dispute_lost"

    class Target(models.TextChoices):
        CHARGE = "charge"
        REFUND = "refund"

    mode = models.CharField(max_length=32, choices=Mode.choices)
    target = models.CharField(max_length=16, choices=Target.choices, default=Target.CHARGE)
    remaining = models.PositiveIntegerField()
    delay_s = models.FloatField(default=0.0)
    copies = models.PositiveSmallIntegerField(default=3)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            # POSTing a mode again re-arms its one counter (upsert on this constraint).
            models.UniqueConstraint(
                fields=["mode", "target"], name="sandbox_fault_mode_target_unique"
            ),
            models.CheckConstraint(
                condition=Q(remaining__gte=0), name="sandbox_fault_remaining_gte_0"
            ),
            models.CheckConstraint(
                condition=Q(delay_s__gte=0, delay_s__lte=60), name="sandbox_fault_delay_bounded"
            ),
            models.CheckConstraint(
                condition=Q(copies__gte=1, copies__lte=10), name="sandbox_fault_copies_bounded"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.mode} ({self.target}) x{self.remaining}"
