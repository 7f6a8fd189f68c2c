"""The sandbox provider's own tables: wallets, charges, its idempotency records,
outgoing notifications and scripted faults.

Money is an integer in minor units. Every rule that must hold under concurrency
is a database constraint, so a bug in a service cannot break it silently.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class Wallet(models.Model):
    """The payer's money at the provider: one per payer, created on first charge."""

    payer = models.CharField(max_length=150)
    # Moved only by the conditional UPDATE in services._wallet_debit; the CHECK
    # makes an overdraft impossible even if a bug tried.
    balance = models.BigIntegerField()
    # Sum of the successful charges, kept in the same UPDATE as the debit so the
    # audit can compare it with the shop's PAID orders without adding up rows.
    charged_total = models.BigIntegerField(default=0)
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
        ]

    def __str__(self) -> str:
        return self.payer


class Charge(models.Model):
    """One merchant payment attempt (``out_trade_no``) and its final outcome.

    A charge is written once, already settled, and never changes: there is no
    pending state a reader could observe. A CLOSED row is the fence written by
    ``charge_close`` before any charge existed; its terms are unknown (NULL).
    """

    class Status(models.TextChoices):
        SUCCESS = "SUCCESS"
        DECLINED = "DECLINED"
        CLOSED = "CLOSED"

    trade_no = models.CharField(max_length=32)
    out_trade_no = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices)
    wallet = models.ForeignKey(
        Wallet, on_delete=models.PROTECT, null=True, blank=True, related_name="charges"
    )
    amount = models.PositiveBigIntegerField(null=True, blank=True)
    # NULL, not "": a CLOSED fence has no terms, and "unknown" reads as null in JSON.
    currency = models.CharField(max_length=3, null=True, blank=True)  # noqa: DJ001
    notify_url = models.TextField(null=True, blank=True)  # noqa: DJ001
    decline_reason = models.CharField(max_length=32, null=True, blank=True)  # noqa: DJ001
    paid_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            # The provider's second line of dedupe after the Idempotency-Key, and
            # what makes a charge and a close of the same attempt exclusive: the
            # loser of a race gets an IntegrityError naming this constraint.
            models.UniqueConstraint(
                fields=["out_trade_no"], name="sandbox_charge_out_trade_no_unique"
            ),
            models.UniqueConstraint(fields=["trade_no"], name="sandbox_charge_trade_no_unique"),
            models.CheckConstraint(
                condition=Q(status="CLOSED")
                | Q(
                    wallet__isnull=False,
                    amount__gt=0,
                    currency__regex=r"^[A-Z]{3}$",
                    notify_url__isnull=False,
                ),
                name="sandbox_charge_settled_has_terms",
            ),
            models.CheckConstraint(
                condition=Q(status="SUCCESS", paid_at__isnull=False)
                | (~Q(status="SUCCESS") & Q(paid_at__isnull=True)),
                name="sandbox_charge_paid_at_iff_success",
            ),
            models.CheckConstraint(
                condition=Q(status="DECLINED", decline_reason__isnull=False)
                | (~Q(status="DECLINED") & Q(decline_reason__isnull=True)),
                name="sandbox_charge_reason_iff_declined",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.trade_no} {self.out_trade_no} {self.status}"

    @property
    def payer(self) -> str | None:
        return self.wallet.payer if self.wallet is not None else None


class IdempotencyRecord(models.Model):
    """What the provider answered to one Idempotency-Key.

    Inserted in the same transaction as the charge and the wallet debit: if the
    charge committed, so did this row, and a retry after any later failure (a
    5xx, a timeout, a dropped connection) replays the true result. Keys are
    global: the sandbox serves a single merchant. Kept forever: a demo provider
    has no retention window to teach.
    """

    key = models.CharField(max_length=255)
    # SHA-256 of the canonical request body: the same key with other terms is a
    # client bug (422), never a replay of a different charge.
    fingerprint = models.CharField(max_length=64)
    charge = models.ForeignKey(Charge, on_delete=models.PROTECT, related_name="+")
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key"], name="sandbox_idempotency_key_unique"),
        ]

    def __str__(self) -> str:
        return self.key


class Notification(models.Model):
    """One copy of an outgoing notification (provider -> merchant callback).

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
    charge = models.ForeignKey(Charge, on_delete=models.PROTECT, related_name="notifications")
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
        ]

    def __str__(self) -> str:
        return f"{self.notify_id}#{self.copy} {self.status}"


class Fault(models.Model):
    """A scripted misbehaviour for the next ``remaining`` new charges.

    One row per mode, each with its own counter, so modes stack. ``remaining``
    is decremented by a conditional UPDATE only (services.fault_take_for_charge).
    """

    class Mode(models.TextChoices):
        DECLINE = "decline"
        ERROR_BEFORE_COMMIT = "error_before_commit"
        ERROR_AFTER_COMMIT = "error_after_commit"
        TIMEOUT_AFTER_COMMIT = "timeout_after_commit"
        CALLBACK_DUPLICATES = "callback_duplicates"
        CALLBACK_SHUFFLE = "callback_shuffle"
        CALLBACK_DROP = "callback_drop"

    mode = models.CharField(max_length=32, choices=Mode.choices)
    remaining = models.PositiveIntegerField()
    delay_s = models.FloatField(default=0.0)
    copies = models.PositiveSmallIntegerField(default=3)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            # POSTing a mode again re-arms its one counter (upsert on this constraint).
            models.UniqueConstraint(fields=["mode"], name="sandbox_fault_mode_unique"),
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
        return f"{self.mode} x{self.remaining}"
