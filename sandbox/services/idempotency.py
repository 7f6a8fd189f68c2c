"""The provider's own Idempotency-Key handling, shared by charges and refunds.

- The record is inserted in the transaction that moves the money, so a retry
  after any failure replays what was committed.
- Dedupe never trusts a prior read: the unique constraints on the merchant's
  reference and on the key are the arbiters, and losing a race on them
  (IntegrityError) sends the request round again, to find the winner's rows.
- Scripted faults that misbehave *after* the commit (a 500, a late answer) are
  applied here, to the answer only: the provider's truth is already settled.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

from django.db import IntegrityError

from sandbox.errors import IdempotencyKeyMismatch, ProviderError
from sandbox.models import Charge, IdempotencyRecord, Refund
from sandbox.services.faults import NO_FAULTS, AppliedFaults

logger = logging.getLogger(__name__)

# Losing a race sends a request back to the replay/dedupe path, where it finds the
# winner's committed row; a third loss in a row would mean a bug, not bad luck.
MAX_RACE_RETRIES = 3


@dataclass(frozen=True)
class Answer:
    """What the provider answers (200) to a charge or refund request."""

    body: dict[str, Any]
    replayed: bool


class Raced(Exception):
    """A concurrent request committed the same reference or key first."""


def fingerprint(terms: Any) -> str:
    """SHA-256 of the canonical JSON of a request's validated terms (a dataclass).

    Key order and whitespace of the raw body do not make a different request; any
    value does. Charge and refund terms have different field names, so a charge's
    key reused for a refund never matches.
    """
    canonical = json.dumps(asdict(terms), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def violated_constraint(error: IntegrityError) -> str | None:
    diag = getattr(error.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None)


def raise_if_raced(error: IntegrityError, constraints: set[str]) -> NoReturn:
    """Losing one of ``constraints`` is losing a race: raise Raced. Else re-raise."""
    if violated_constraint(error) in constraints:
        raise Raced from error
    raise error


def record_replay(*, key: str, fingerprint: str) -> Answer | None:
    """The stored answer for ``key``; 422 if it was used with other terms; None if new."""
    record = IdempotencyRecord.objects.filter(key=key).first()
    if record is None:
        return None
    if record.fingerprint != fingerprint:
        raise IdempotencyKeyMismatch()
    return Answer(body=record.response_body, replayed=True)


def record_insert(
    *,
    key: str,
    fingerprint: str,
    body: dict[str, Any],
    charge: Charge | None = None,
    refund: Refund | None = None,
) -> None:
    IdempotencyRecord.objects.create(
        key=key,
        fingerprint=fingerprint,
        charge=charge,
        refund=refund,
        response_status=200,
        response_body=body,
    )


def once_per_key(
    attempt: Callable[[], tuple[Answer | None, AppliedFaults]], *, reference: str
) -> Answer:
    """Run ``attempt`` (one transaction) until it does not lose a race; then misbehave
    as its faults say. A None answer is error_before_commit: nothing was committed."""
    for _ in range(MAX_RACE_RETRIES):
        try:
            answer, faults = attempt()
            break
        except Raced:
            continue  # the winner has committed: the next pass replays or dedupes
    else:
        raise RuntimeError(f"{reference!r} lost {MAX_RACE_RETRIES} races in a row")

    # Everything below happens after the commit: the provider's truth is settled,
    # only the answer on the wire misbehaves.
    if faults != NO_FAULTS:
        logger.info("sandbox faults for %s: %s", reference, faults)
    if faults.delay_s:
        # The merchant's read timeout fires first; the money has already moved.
        time.sleep(faults.delay_s)
    if answer is None or faults.fail_after_commit:
        raise ProviderError()
    return answer
