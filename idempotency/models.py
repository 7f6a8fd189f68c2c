"""The idempotency record: one row per (user, Idempotency-Key)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q


class RecoveryPoint:
    """Where a request stands. Every flow starts at STARTED and ends at FINISHED;
    a multi-phase flow subclasses this to name the points in between. (A class,
    not module constants, so ``match`` can use them as value patterns.)"""

    STARTED = "started"
    FINISHED = "finished"


class IdempotencyKey(models.Model):
    """What became of one client request, identified by its Idempotency-Key.

    The row is written in the same transaction as the business rows of each
    phase, so it can never claim a result the database does not hold (nor miss
    one it does). While a request runs, ``lock_token`` holds that request's
    random token: every phase commit is fenced on it, so a request that was
    presumed dead and taken over cannot commit anything afterwards.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    # SHA-256 of method, route and canonical body: the same key with another
    # payload is a client bug (422), never a silent replay of something else.
    fingerprint = models.CharField(max_length=64)
    method = models.CharField(max_length=10)
    path = models.TextField()

    recovery_point = models.CharField(max_length=32, default=RecoveryPoint.STARTED)
    lock_token = models.UUIDField(null=True, blank=True)
    locked_at = models.DateTimeField(null=True, blank=True)

    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # The JSON text exactly as first rendered (not jsonb, which reorders keys): a
    # replay is the same bytes as the first answer, not merely equal JSON.
    response_body = models.TextField(blank=True, default="")
    response_headers = models.JSONField(default=dict, blank=True)
    # The business object this request made (audit invariant 4).
    resource_type = models.CharField(max_length=32, blank=True, default="")
    resource_id = models.BigIntegerField(null=True, blank=True)

    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # The scope of a key is (user, key): two users may pick the same key.
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_unique_per_user"),
            # A finished record always carries the response it replays.
            models.CheckConstraint(
                condition=~Q(recovery_point=RecoveryPoint.FINISHED)
                | (Q(response_status__isnull=False) & Q(finished_at__isnull=False)),
                name="idempotency_finished_has_response",
            ),
        ]
        indexes = [
            # The reaper walks finished records by age; unfinished ones are never reaped.
            models.Index(
                fields=["finished_at"],
                condition=Q(recovery_point=RecoveryPoint.FINISHED),
                name="idempotency_reap_idx",
            ),
            # The completer and the audit look for unfinished records by lock age.
            models.Index(
                fields=["locked_at"],
                condition=~Q(recovery_point=RecoveryPoint.FINISHED),
                name="idempotency_unfinished_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.recovery_point})"

    @property
    def is_finished(self) -> bool:
        return self.recovery_point == RecoveryPoint.FINISHED

    @property
    def expires_at(self) -> datetime | None:
        if self.finished_at is None:
            return None  # unfinished records never expire
        return self.finished_at + timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)
