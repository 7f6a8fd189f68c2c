"""The provider's daily statements, imported once, and what matching them found.

Three tables, each with the constraint that makes its "once" true:

- ``StatementImport``: one row per (provider, day), whoever imports it and
  however often (a unique constraint decides, not a lock);
- ``StatementLine``: one row per line of any statement, unique per provider id
  (a rerun of a growing day adds only the lines it had not seen);
- ``StatementDiscrepancy``: what matching found that it cannot settle by asking
  the provider, one per (kind, line) or (kind, ledger entry); resolved by a
  later statement or by staff with a note, never deleted.

(``StrayCapture``, what the statement found that is not ours, is recovery's:
reconcile/recovery/models.py.) The tables keep the names they were created
under, in the reconcile app (``db_table``), which the hand-written SQL of
matching.py, settling.py and importing.py names.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from reconcile.recovery.models import SANDBOX


class StatementImport(models.Model):
    """A day's statement from one provider: imported once, re-read while the day grows."""

    provider = models.CharField(max_length=32, default=SANDBOX)
    day = models.DateField()
    created_at = models.DateTimeField(auto_now_add=True)
    # The start of the latest download that read the whole statement: everything the
    # provider had settled by then is in our lines (see operations/statements/importing.py).
    covered_until = models.DateTimeField(null=True, blank=True)
    downloads = models.PositiveIntegerField(default=0)  # complete downloads
    lines = models.PositiveIntegerField(default=0)  # lines held after the latest one
    matched_at = models.DateTimeField(null=True, blank=True)  # the latest full matching
    # Why the latest attempt failed (an unreadable statement, the provider down);
    # cleared by the next complete download.
    error = models.TextField(blank=True, default="")

    class Meta:
        db_table = "reconcile_statementimport"
        ordering = ["-day", "provider"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "day"], name="statement_one_import_per_provider_day"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider} {self.day}"


class LineKind(models.TextChoices):
    """What a line is (``payments.providers.StatementKind``, one for one)."""

    CHARGE = "charge"
    REFUND = "refund"
    REFUND_FAILURE = "refund_failure"  # a refund that failed after it succeeded
    DISPUTE_WITHDRAWAL = "dispute_withdrawal"
    DISPUTE_REINSTATEMENT = "dispute_reinstatement"
    OTHER = "other"  # payouts, the provider's fees, ...: the merchant's account's own


class LineOutcome(models.TextChoices):
    PENDING = "pending"  # not matched yet (or its attempt is still in flight)
    MATCHED = "matched"  # our ledger has it: same provider id, amount and currency
    STRAY = "stray"  # a capture (or its refund) of a reference we hold no attempt for
    DISCREPANCY = "discrepancy"  # see its StatementDiscrepancy
    # Money of the merchant's account itself (a payout, a fee): recorded, and not
    # ours to match against payments.
    NOT_OURS = "not_ours"


class StatementLine(models.Model):
    """One line of a provider's statement: money that moved there, and what we made of it."""

    Kind = LineKind
    Outcome = LineOutcome

    statement = models.ForeignKey(StatementImport, on_delete=models.PROTECT, related_name="+")
    provider = models.CharField(max_length=32, default=SANDBOX)
    kind = models.CharField(max_length=24, choices=Kind.choices)
    line_no = models.PositiveIntegerField()
    # trade_no, refund_id, a dispute's id, or (other) the provider's transaction id
    provider_id = models.CharField(max_length=64)
    # out_trade_no or out_refund_no (a dispute: its charge's); other: what it is (payout)
    reference = models.CharField(max_length=64)
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=16)
    settled_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.PENDING)
    ledger_entry = models.ForeignKey(
        "payments.LedgerEntry", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    stray = models.ForeignKey(
        "reconcile.StrayCapture", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    note = models.TextField(blank=True, default="")  # what matching did about it
    matched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "reconcile_statementline"
        ordering = ["statement", "id"]
        constraints = [
            # Each line once, however many imports or reruns read it.
            models.UniqueConstraint(
                fields=["provider", "kind", "provider_id"], name="statement_line_once"
            ),
        ]
        indexes = [
            # Matching walks the lines still pending, by id: the set left to do.
            models.Index(
                fields=["statement", "id"],
                condition=Q(outcome=LineOutcome.PENDING),
                name="statement_line_pending_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.provider_id} {self.amount} {self.currency}"


class DiscrepancyKind(models.TextChoices):
    # A line and our ledger entry for it disagree on the amount or the currency.
    AMOUNT_DIFFERS = "amount-differs"
    # A ledger entry booked before the statement's download that no statement lists.
    NOT_ON_STATEMENT = "not-on-statement"
    # A refund line for a reference we hold no refund attempt (nor stray capture) for.
    UNKNOWN_REFUND = "unknown-refund"
    # A dispute line (or its account at the provider) for a charge no attempt of ours holds.
    UNKNOWN_DISPUTE = "unknown-dispute"
    # A capture or refund with no ledger entry that asking the provider did not settle.
    NOT_BOOKED = "not-booked"


class StatementDiscrepancy(models.Model):
    """Something the statement and our books disagree on, open until resolved.

    Resolved by a later statement (a ledger entry that a later day lists) or by
    staff with a note in the admin; either way the row stays, with who, when
    and why. The audit reports every open one (invariant 7).
    """

    Kind = DiscrepancyKind

    kind = models.CharField(max_length=24, choices=Kind.choices)
    day = models.DateField()  # the statement's day that found it
    line = models.ForeignKey(
        StatementLine, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    ledger_entry = models.ForeignKey(
        "payments.LedgerEntry", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    reason = models.TextField()
    opened_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    resolution = models.TextField(blank=True, default="")

    class Meta:
        db_table = "reconcile_statementdiscrepancy"
        verbose_name_plural = "statement discrepancies"
        ordering = ["-opened_at", "-id"]
        constraints = [
            # Found again by a rerun: the same row, not a second one (nor a reopening
            # of one staff resolved).
            models.UniqueConstraint(
                fields=["kind", "line"],
                condition=Q(line__isnull=False),
                name="discrepancy_once_per_line",
            ),
            models.UniqueConstraint(
                fields=["kind", "ledger_entry"],
                condition=Q(line__isnull=True),
                name="discrepancy_once_per_ledger_entry",
            ),
            models.CheckConstraint(
                condition=Q(line__isnull=False) | Q(ledger_entry__isnull=False),
                name="discrepancy_names_a_line_or_entry",
            ),
            models.CheckConstraint(
                condition=Q(resolved_at__isnull=True, resolution="")
                | (Q(resolved_at__isnull=False) & ~Q(resolution="")),
                name="discrepancy_resolution_has_a_note",
            ),
        ]
        indexes = [
            models.Index(
                fields=["opened_at"],
                condition=Q(resolved_at__isnull=True),
                name="discrepancy_open_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} ({self.day})"
