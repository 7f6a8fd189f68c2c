"""Payment attempts, refund attempts and the ledger (every movement of money)."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q


class PaymentStatus(models.TextChoices):
    PENDING = "PENDING"  # created; the provider is being (or about to be) asked
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # declined, or fenced (closed) at the provider
    UNKNOWN = "UNKNOWN"  # the provider timed out or failed: reconcile, never guess
    # The provider captured it, but the order could not take the money (paid by
    # another attempt, cancelled, expired, refunded, or another amount): booked
    # as an orphaned capture and refunded automatically. Neither live nor
    # SUCCEEDED, so "one live attempt" and "one capture per PAID order" hold.
    ORPHANED = "ORPHANED"


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
    # Reconciliation bookkeeping (reconcile/recovery/unsettled_payments.py), never business
    # state. How many times the provider could not be reached about this attempt:
    # drives the exponential backoff.
    reconcile_attempts = models.PositiveIntegerField(default=0)
    # Not before this time: a reconciler's lease while it works on the attempt, or
    # the next try after the provider was unreachable. NULL: due as soon as it is old.
    next_reconcile_at = models.DateTimeField(null=True, blank=True)
    # When the provider first asked for the customer (pay answered 202): a retry then
    # asks the provider before it charges, since a replayed charge would repeat the
    # first answer, not what the customer did since.
    action_required_at = models.DateTimeField(null=True, blank=True)

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


class RefundAttemptStatus(models.TextChoices):
    PENDING = "PENDING"  # created; the provider is being (or about to be) asked
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # the provider declined it
    UNKNOWN = "UNKNOWN"  # the provider timed out or failed: reconcile, never guess
    # Succeeded, then failed at the provider (a closed card): the money came back to
    # the shop, a reversing ledger entry books it, and the payer still awaits it.
    REVERSED = "REVERSED"


UNSETTLED_REFUND_STATUSES = (RefundAttemptStatus.PENDING, RefundAttemptStatus.UNKNOWN)
# What the automatic refund of an orphaned capture carries as its reason.
ORPHANED_CAPTURE_REASON = "orphaned-capture"


class Refund(models.Model):
    """One attempt to give money back at the provider: the pay attempt's mirror image.

    ``refund_no`` is our reference (the provider's ``out_refund_no``), unique;
    ``refund_id`` is the provider's id for the refund, unique once known. At
    most one refund per order is in flight (pending or unknown): a second one
    finds the partial unique index in its way, so two refunds never race for
    the same refundable rest.

    ``order`` is NULL for the refund of an orphaned capture: that money was never
    the order's, and the order's ``refunded_amount`` never counts it. ``payment``
    is always the captured attempt the money comes back from.
    """

    Status = RefundAttemptStatus

    order = models.ForeignKey(
        "orders.Order", on_delete=models.PROTECT, null=True, blank=True, related_name="refunds"
    )
    payment = models.ForeignKey(Payment, on_delete=models.PROTECT, related_name="refunds")
    refund_no = models.CharField(max_length=64, unique=True)
    refund_id = models.CharField(max_length=64, null=True, blank=True, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    reason = models.CharField(max_length=200, blank=True, default="")
    failure_code = models.CharField(max_length=64, blank=True, default="")
    # The Idempotency-Key of the request that started it: one refund per (order, key)
    # for the order's life, even once the key's record is reaped. NULL for an orphaned
    # capture's refunds, which no request starts (NULLs never collide on the index).
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    # Reconciliation bookkeeping, exactly as on Payment.
    reconcile_attempts = models.PositiveIntegerField(default=0)
    next_reconcile_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["order"],
                condition=Q(status__in=UNSETTLED_REFUND_STATUSES),
                name="refund_one_live_per_order",
            ),
            models.UniqueConstraint(
                fields=["order", "idempotency_key"], name="refund_one_per_order_key"
            ),
            # An orphaned capture is refunded by one attempt at a time ...
            models.UniqueConstraint(
                fields=["payment"],
                condition=Q(order__isnull=True, status__in=UNSETTLED_REFUND_STATUSES),
                name="refund_one_unsettled_per_orphaned_capture",
            ),
            # ... and succeeds once. Not "one live": an attempt declined now may be
            # carried out later while the next one is in flight, and that late
            # success must be bookable (payments/orphans.py, "Late outcomes").
            models.UniqueConstraint(
                fields=["payment"],
                condition=Q(order__isnull=True, status=RefundAttemptStatus.SUCCEEDED),
                name="refund_one_succeeded_per_orphaned_capture",
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="refund_amount_positive"),
        ]
        indexes = [
            models.Index(
                fields=["updated_at"],
                condition=Q(status__in=UNSETTLED_REFUND_STATUSES),
                name="refund_unsettled_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.refund_no} ({self.status})"


class LedgerKind(models.TextChoices):
    CAPTURE = "capture"  # the one capture of a PAID (later maybe REFUNDED) order
    REFUND = "refund"  # money given back from an order's capture
    ORPHAN_CAPTURE = "orphan_capture"  # captured for an attempt the order could not take
    ORPHAN_REFUND = "orphan_refund"  # ... and given back
    # A refund that failed after it succeeded: its money came back to us.
    REFUND_REVERSAL = "refund_reversal"
    ORPHAN_REFUND_REVERSAL = "orphan_refund_reversal"
    # A dispute (chargeback) took a capture's money back to the payer ...
    DISPUTE_WITHDRAWAL = "dispute_withdrawal"
    # ... and, won, gave it back to us.
    DISPUTE_REINSTATEMENT = "dispute_reinstatement"


CAPTURE_KINDS = (LedgerKind.CAPTURE, LedgerKind.ORPHAN_CAPTURE)
REFUND_KINDS = (LedgerKind.REFUND, LedgerKind.ORPHAN_REFUND)
REVERSAL_KINDS = (LedgerKind.REFUND_REVERSAL, LedgerKind.ORPHAN_REFUND_REVERSAL)
DISPUTE_KINDS = (LedgerKind.DISPUTE_WITHDRAWAL, LedgerKind.DISPUTE_REINSTATEMENT)
# The kinds that bring money to the shop; every other kind takes it back to the payer.
MONEY_IN_KINDS = (*CAPTURE_KINDS, *REVERSAL_KINDS, LedgerKind.DISPUTE_REINSTATEMENT)


class DisputeStatus(models.TextChoices):
    OPEN = "OPEN"  # the payer's bank disputes the charge; a person may answer it
    WON = "WON"  # closed in our favour: what was withdrawn came back
    LOST = "LOST"  # closed in the payer's favour: the money stays with the payer


class Dispute(models.Model):
    """A chargeback of one captured attempt, as the provider tells it: one row per
    provider dispute id, however often it is notified or listed.

    Its money is in the ledger, one entry per direction (withdrawn, reinstated),
    unique per dispute; ``withdrawn`` and ``reinstated`` say what those entries
    hold. The status moves OPEN -> WON or LOST once, by a conditional update, and
    a closed dispute never reopens. The order is not touched: it was paid and
    stays PAID (or REFUNDED); what the payer got back through the dispute is the
    dispute's, never counted in the order's ``refunded_amount``.
    """

    Status = DisputeStatus

    dispute_id = models.CharField(max_length=64, unique=True)  # the provider's id
    payment = models.ForeignKey(Payment, on_delete=models.PROTECT, related_name="disputes")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OPEN)
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    reason = models.CharField(max_length=64, blank=True, default="")
    withdrawn = models.PositiveBigIntegerField(default=0)
    reinstated = models.PositiveBigIntegerField(default=0)
    opened_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["opened_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(reinstated__lte=F("withdrawn")),
                name="dispute_reinstates_at_most_what_it_withdrew",
            ),
            models.CheckConstraint(
                condition=Q(status=DisputeStatus.OPEN, closed_at__isnull=True)
                | (~Q(status=DisputeStatus.OPEN) & Q(closed_at__isnull=False)),
                name="dispute_closed_at_iff_closed",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.dispute_id} ({self.status})"


class LedgerEntry(models.Model):
    """Money that moved at the provider: one row per capture, refund, refund reversal
    and dispute movement.

    Unique indexes say what may never happen twice, whatever a bug above does:
    one capture per order, one capture (of either kind) per attempt and per
    provider charge (``trade_no``), one refund entry and one reversal per refund
    attempt and per provider refund (``refund_id``), one withdrawal and one
    reinstatement per dispute. ``MONEY_IN_KINDS`` (captures, reversals,
    reinstatements) are positive in the books, the others subtracted; the audit
    adds them up against the provider.
    """

    Kind = LedgerKind

    kind = models.CharField(max_length=24, choices=Kind.choices, default=Kind.CAPTURE)
    order = models.ForeignKey(
        "orders.Order", on_delete=models.PROTECT, related_name="ledger_entries"
    )
    # The captured attempt (for a refund: the one it gives money back from).
    payment = models.ForeignKey(Payment, on_delete=models.PROTECT, related_name="ledger_entries")
    # A refund (or its reversal): the refund attempt it books, and the provider's id.
    refund_attempt = models.ForeignKey(
        Refund, on_delete=models.PROTECT, null=True, blank=True, related_name="ledger_entries"
    )
    refund_id = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    # A dispute's withdrawal or reinstatement: the dispute it books.
    dispute = models.ForeignKey(
        Dispute, on_delete=models.PROTECT, null=True, blank=True, related_name="ledger_entries"
    )
    trade_no = models.CharField(max_length=64)  # the provider's charge
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "ledger entries"
        constraints = [
            models.UniqueConstraint(
                fields=["order"],
                condition=Q(kind=LedgerKind.CAPTURE),
                name="ledger_one_capture_per_order",
            ),
            models.UniqueConstraint(
                fields=["payment"],
                condition=Q(kind__in=CAPTURE_KINDS),
                name="ledger_one_capture_per_payment",
            ),
            models.UniqueConstraint(
                fields=["trade_no"],
                condition=Q(kind__in=CAPTURE_KINDS),
                name="ledger_one_capture_per_trade_no",
            ),
            # Each refund attempt and each provider refund: booked once, reversed once.
            models.UniqueConstraint(
                fields=["refund_attempt"],
                condition=Q(kind__in=REFUND_KINDS),
                name="ledger_one_refund_per_refund_attempt",
            ),
            models.UniqueConstraint(
                fields=["refund_id"],
                condition=Q(kind__in=REFUND_KINDS),
                name="ledger_one_refund_per_refund_id",
            ),
            models.UniqueConstraint(
                fields=["refund_attempt"],
                condition=Q(kind__in=REVERSAL_KINDS),
                name="ledger_one_reversal_per_refund_attempt",
            ),
            models.UniqueConstraint(
                fields=["refund_id"],
                condition=Q(kind__in=REVERSAL_KINDS),
                name="ledger_one_reversal_per_refund_id",
            ),
            models.UniqueConstraint(
                fields=["dispute", "kind"],
                condition=Q(kind__in=DISPUTE_KINDS),
                name="ledger_one_movement_per_dispute_and_direction",
            ),
            # A capture names no refund nor dispute; a refund (or its reversal) names
            # its attempt and the provider's id; a dispute's movement names the dispute.
            models.CheckConstraint(
                condition=(
                    Q(
                        kind__in=CAPTURE_KINDS,
                        refund_attempt__isnull=True,
                        refund_id__isnull=True,
                        dispute__isnull=True,
                    )
                    | Q(
                        kind__in=[*REFUND_KINDS, *REVERSAL_KINDS],
                        refund_attempt__isnull=False,
                        refund_id__isnull=False,
                        dispute__isnull=True,
                    )
                    | Q(
                        kind__in=DISPUTE_KINDS,
                        refund_attempt__isnull=True,
                        refund_id__isnull=True,
                        dispute__isnull=False,
                    )
                ),
                name="ledger_fields_match_kind",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.trade_no}: {self.amount} {self.currency}"
