"""Charges and refunds: one row per merchant reference, each with its outcome."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from demo.sandbox.models.wallets import Wallet


class Charge(models.Model):
    """One merchant payment attempt (``out_trade_no``) and its outcome.

    A charge is written already settled: there is no pending state a reader could
    observe. Its terms never change. Its status changes in one case only: a charge
    declined under the ``late_success`` fault carries ``late_success_at``, and at
    that time one conditional UPDATE (DECLINED with the marker -> SUCCESS, or ->
    DECLINED for good when the wallet cannot cover it) clears the marker; nothing
    else ever moves a status. ``refunded_total`` grows by conditional UPDATE only.
    A CLOSED row is the fence written by ``charge_close`` before any charge
    existed; its terms are unknown (NULL). ``disputes_at``: a SUCCESS charge the
    ``dispute_lost`` fault will have disputed then (services.disputes).

    ACTION_REQUIRED (the ``requires_action`` fault) is the one state that waits:
    the customer must act (as for 3-D Secure) with the charge's ``client_secret``,
    and moves it once, by a conditional UPDATE, to SUCCESS or DECLINED
    (services.customer_action); a close fences it as CLOSED. Nothing is debited
    while it waits.
    """

    class Status(models.TextChoices):
        SUCCESS = "SUCCESS"
        DECLINED = "DECLINED"
        CLOSED = "CLOSED"
        ACTION_REQUIRED = "ACTION_REQUIRED"

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
    # The sum of this charge's successful refunds (services.refunds): never above amount.
    refunded_total = models.PositiveBigIntegerField(default=0)
    # Set while a late success is scheduled (services.late_success), cleared when it runs.
    late_success_at = models.DateTimeField(null=True, blank=True)
    # What the customer proves they are the payer with (ACTION_REQUIRED charges only).
    client_secret = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    # Set while a dispute is scheduled (services.disputes), cleared when it opens; then
    # ``disputed_at`` says when: a disputed charge is refunded no more.
    disputes_at = models.DateTimeField(null=True, blank=True)
    disputed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(status="ACTION_REQUIRED") | Q(client_secret__isnull=False),
                name="sandbox_charge_action_has_secret",
            ),
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
            # Only money that was taken can be given back, and never more of it.
            models.CheckConstraint(
                condition=Q(refunded_total=0)
                | Q(status="SUCCESS", refunded_total__lte=F("amount")),
                name="sandbox_charge_refunds_within_amount",
            ),
            # Only a declined charge can be waiting to succeed.
            models.CheckConstraint(
                condition=Q(late_success_at__isnull=True) | Q(status="DECLINED"),
                name="sandbox_charge_late_success_only_declined",
            ),
            # Only money that was taken can be disputed.
            models.CheckConstraint(
                condition=Q(disputes_at__isnull=True) | Q(status="SUCCESS"),
                name="sandbox_charge_dispute_only_success",
            ),
        ]
        indexes = [
            # The daily statement reads a day's successful charges in paid_at order.
            models.Index(
                fields=["paid_at", "id"],
                condition=Q(status="SUCCESS"),
                name="sandbox_charge_statement_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.trade_no} {self.out_trade_no} {self.status}"

    @property
    def payer(self) -> str | None:
        return self.wallet.payer if self.wallet is not None else None


class Refund(models.Model):
    """One merchant refund (``out_refund_no``) of a charge, and its final outcome.

    Written once, already settled, and never changed, but for two cases: a refund
    declined under ``late_success`` (``late_success_at`` set) becomes SUCCESS
    once, later (services.late_success); a SUCCESS refund under
    ``refund_reversal`` (``reverses_at`` set) becomes REVERSED once, later: it
    failed on its way to the payer and its money came back (services.reversals).
    A DECLINED refund moved no money; its amount is what was asked for.
    ``currency`` is the charge's, so it is NULL only for a declined refund of a
    CLOSED fence (whose terms are unknown).
    """

    class Status(models.TextChoices):
        SUCCESS = "SUCCESS"
        DECLINED = "DECLINED"
        REVERSED = "REVERSED"  # it succeeded, then failed: the money came back

    refund_id = models.CharField(max_length=32)
    out_refund_no = models.CharField(max_length=64)
    charge = models.ForeignKey(Charge, on_delete=models.PROTECT, related_name="refunds")
    status = models.CharField(max_length=16, choices=Status.choices)
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3, null=True, blank=True)  # noqa: DJ001
    notify_url = models.TextField()
    decline_reason = models.CharField(max_length=32, null=True, blank=True)  # noqa: DJ001
    refunded_at = models.DateTimeField(null=True, blank=True)
    # late_success: when this DECLINED refund is to succeed (cleared when it is tried).
    late_success_at = models.DateTimeField(null=True, blank=True)
    # refund_reversal: when this SUCCESS refund is to fail (cleared when it is tried).
    reverses_at = models.DateTimeField(null=True, blank=True)
    reversed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            # The dedupe after the Idempotency-Key: one refund per merchant reference,
            # whichever key it came with; the loser of a race gets an IntegrityError.
            models.UniqueConstraint(
                fields=["out_refund_no"], name="sandbox_refund_out_refund_no_unique"
            ),
            models.UniqueConstraint(fields=["refund_id"], name="sandbox_refund_refund_id_unique"),
            models.CheckConstraint(condition=Q(amount__gt=0), name="sandbox_refund_amount_gt_0"),
            # A reversed refund did succeed first: it keeps when.
            models.CheckConstraint(
                condition=Q(
                    status__in=["SUCCESS", "REVERSED"],
                    refunded_at__isnull=False,
                    currency__isnull=False,
                )
                | (Q(status="DECLINED") & Q(refunded_at__isnull=True)),
                name="sandbox_refund_refunded_at_iff_it_went_through",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["DECLINED", "REVERSED"], decline_reason__isnull=False)
                | (Q(status="SUCCESS") & Q(decline_reason__isnull=True)),
                name="sandbox_refund_reason_iff_not_success",
            ),
            models.CheckConstraint(
                condition=Q(status="REVERSED", reversed_at__isnull=False)
                | (~Q(status="REVERSED") & Q(reversed_at__isnull=True)),
                name="sandbox_refund_reversed_at_iff_reversed",
            ),
            models.CheckConstraint(
                condition=Q(reverses_at__isnull=True) | Q(status="SUCCESS"),
                name="sandbox_refund_reversal_only_success",
            ),
        ]
        indexes = [
            # The daily statement reads a day's successful refunds in refunded_at order.
            models.Index(
                fields=["refunded_at", "id"],
                condition=Q(status="SUCCESS"),
                name="sandbox_refund_statement_idx",
            ),
            # ... and the day's reversed ones, in reversed_at order.
            models.Index(
                fields=["reversed_at", "id"],
                condition=Q(status="REVERSED"),
                name="sandbox_refund_reversed_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.refund_id} {self.out_refund_no} {self.status}"

    @property
    def out_trade_no(self) -> str:
        return self.charge.out_trade_no
