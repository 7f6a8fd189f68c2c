"""Cases, the actions taken on them, and the failure counts of batch items.

- ``Case``: something the shop cannot settle by itself. Its subject is a row the
  audit names (``subject_type`` is the key a finding's ids use: ``payment``,
  ``refund``, ``notification``, ``line``, ``discrepancy``, ``stray``), and a
  partial unique index keeps one open case per subject and job, however often
  the machine finds it again. ``job`` is the batch job whose item failed (an
  ``item-failed`` case; empty for every other kind): two jobs may fail on one
  subject (the payments job and the orphan-refunds job both on a payment), and
  each has its own case, closed when that job's item settles, never by the other.
  Resolved by a person (with a note) or by the machine (the item settled after
  all); never deleted.
- ``CaseAction``: each action taken on a case, with who and why (and who approved it,
  for one that needed a second person).
- ``CaseApproval``: a refund or accept above ``DESK_APPROVAL_ABOVE`` asked for by one
  person, waiting for another to approve it; one pending per case.
- ``ItemFailure``: how often one item of a batch job raised, and when it is due
  again; written in its own transaction, so it stays when the item's rolled back.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q


class CaseKind(models.TextChoices):
    # A notification for a reference the shop never used (forged, or another shop's).
    UNKNOWN_NOTIFICATION = "unknown-notification"
    # A statement line for a reference the shop never used.
    UNKNOWN_LINE = "unknown-line"
    # A statement discrepancy still open (amount differs, not on the statement, ...).
    DISCREPANCY = "discrepancy"
    # A payment or refund attempt still unresolved CASE_AFTER_S after it started.
    UNRESOLVED = "unresolved"
    # A batch item that raised CASE_AFTER_FAILURES times in a row.
    ITEM_FAILED = "item-failed"
    # A refund that succeeded and then failed at the provider: the customer awaits it.
    REFUND_REVERSED = "refund-reversed"
    # A dispute (chargeback) still open: a person may answer it at the provider.
    DISPUTE = "dispute"
    # A notification the provider's own answer contradicts: asked once, then a person's.
    CONTRADICTED = "contradicted"


class CaseState(models.TextChoices):
    OPEN = "open"
    RESOLVED = "resolved"


class CaseActionKind(models.TextChoices):
    RETRY = "retry"  # do now what the machine would do at its next pass
    REFUND = "refund"  # give the money back (only what the provider confirms)
    ACCEPT = "accept"  # settle from the provider's account of it
    DISMISS = "dismiss"  # nothing to do: closed with the person's reason
    APPROVE = "approve"  # a second person lets another's refund or accept go ahead


# What each action asks of the person taking it: a Django permission on Case.
PERMISSIONS: dict[str, str] = {
    CaseActionKind.RETRY: "reconcile.retry_case",
    CaseActionKind.REFUND: "reconcile.refund_case",
    CaseActionKind.ACCEPT: "reconcile.accept_case",
    CaseActionKind.DISMISS: "reconcile.dismiss_case",
    CaseActionKind.APPROVE: "reconcile.approve_case",
}


class Case(models.Model):
    """One matter for a person, about one subject; open until a person or the machine closes it."""

    Kind = CaseKind
    State = CaseState

    kind = models.CharField(max_length=24, choices=Kind.choices)
    subject_type = models.CharField(max_length=16)
    subject_id = models.BigIntegerField()
    job = models.CharField(max_length=32, blank=True, default="")  # an item-failed case's job
    reference = models.CharField(max_length=64, blank=True, default="")  # as the provider knows it
    summary = models.TextField()  # what the shop knows, in words
    state = models.CharField(max_length=8, choices=State.choices, default=State.OPEN)
    opened_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    resolution = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["opened_at", "id"]
        # One per action (PERMISSIONS): who may move money is not who may dismiss.
        permissions = [
            ("retry_case", "Can make a case's subject due now"),
            ("refund_case", "Can refund the capture a case is about"),
            ("accept_case", "Can settle a case from the provider's word"),
            ("dismiss_case", "Can dismiss a case with a reason"),
            ("approve_case", "Can approve another person's refund or accept"),
        ]
        constraints = [
            # Found again by every pass: the same open case, never a second one.
            models.UniqueConstraint(
                fields=["subject_type", "subject_id", "job"],
                condition=Q(state=CaseState.OPEN),
                name="case_one_open_per_subject_and_job",
            ),
            models.CheckConstraint(
                condition=Q(state=CaseState.OPEN, resolved_at__isnull=True, resolution="")
                | (Q(state=CaseState.RESOLVED, resolved_at__isnull=False) & ~Q(resolution="")),
                name="case_resolution_has_a_note",
            ),
        ]

    def __str__(self) -> str:
        return f"case {self.pk}: {self.kind} {self.reference}"


class CaseAction(models.Model):
    """An action a person took on a case: what, who, why, and what came of it."""

    case = models.ForeignKey(Case, on_delete=models.PROTECT, related_name="actions")
    action = models.CharField(max_length=8, choices=CaseActionKind.choices)
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    by_name = models.CharField(max_length=150)  # the user's name, as it was then
    # The second person, for a refund or accept that needed one (DESK_APPROVAL_ABOVE).
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    note = models.TextField()
    outcome = models.TextField(blank=True, default="")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.action} by {self.by_name}"


class ApprovalState(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    CLOSED = "closed"  # the case was closed before anyone approved: nothing done


class CaseApproval(models.Model):
    """A refund or accept asked for by one person, for a second person to approve.

    Approving it claims it (a conditional UPDATE on ``pending``), so a double click
    approves once; the action then runs as the requester's, with the approver
    recorded beside them. The requester can never approve their own.
    """

    State = ApprovalState

    case = models.ForeignKey(Case, on_delete=models.PROTECT, related_name="approvals")
    action = models.CharField(max_length=8, choices=CaseActionKind.choices)
    amount = models.BigIntegerField()  # what the action may move, in minor units
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    note = models.TextField()  # the requester's reason
    requested_at = models.DateTimeField(auto_now_add=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["requested_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["case"],
                condition=Q(state=ApprovalState.PENDING),
                name="case_approval_one_pending",
            ),
            # Four eyes: whoever approves is not whoever asked.
            models.CheckConstraint(
                condition=~Q(approved_by=F("requested_by")),
                name="case_approval_second_person",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} on case {self.case_id} by {self.requested_by_id}: {self.state}"


class ItemFailure(models.Model):
    """How often one item of a batch job raised in a row, and when it is tried again."""

    job = models.CharField(max_length=32)  # the item's kind: payment, notification, line, ...
    key = models.CharField(max_length=64)  # the item's id in its job
    reference = models.CharField(max_length=64, blank=True, default="")
    failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    first_failed_at = models.DateTimeField()
    last_failed_at = models.DateTimeField()
    next_try_at = models.DateTimeField()

    class Meta:
        ordering = ["job", "key"]
        constraints = [
            models.UniqueConstraint(fields=["job", "key"], name="item_failure_once_per_item"),
        ]

    def __str__(self) -> str:
        return f"{self.job} {self.key}: {self.failures} failure(s)"
