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
from typing import Any, NoReturn, TypeVar

from django.db import IntegrityError, transaction

from demo.sandbox.errors import IdempotencyKeyMismatch, ProviderError
from demo.sandbox.models import Charge, IdempotencyRecord, Refund
from demo.sandbox.services.faults import NO_FAULTS, AppliedFaults, fault_take_for

logger = logging.getLogger(__name__)
T = TypeVar("T")

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


class _Abandon(Exception):
    """error_before_commit: undo the new row and its money, keep the consumed fault count."""


def _attempt(
    *,
    key: str,
    fingerprint: str,
    target: str,
    race_constraints: set[str],
    dedupe: Callable[[], Answer | None],
    settle: Callable[[AppliedFaults], T],
    finish: Callable[[T, AppliedFaults], Answer],
) -> tuple[Answer | None, AppliedFaults]:
    """One attempt inside one transaction. None as the answer: error_before_commit."""
    try:
        with transaction.atomic():
            # Fast paths first, so replays and dedupes never touch the fault rows.
            # These reads decide nothing on their own: if they miss a row that a
            # concurrent request is committing, the INSERTs below collide with it
            # (IntegrityError -> Raced) and the caller comes back here.
            if replay := record_replay(key=key, fingerprint=fingerprint):
                return replay, NO_FAULTS
            if deduped := dedupe():
                return deduped, NO_FAULTS

            # Consumed in the outer transaction: if we lose a race below (or the
            # request is refused), all of it rolls back and the counts stay for the
            # requests that really are new. If error_before_commit fires, only the
            # savepoint rolls back and the consumed count commits (else the retry
            # would fail again, forever).
            faults = fault_take_for(target)
            try:
                with transaction.atomic():  # savepoint: the new row and all it implies
                    made = settle(faults)
                    if faults.fail_before_commit:
                        # After the INSERT on purpose: only a request that would really
                        # have been carried out fails; a duplicate still dedupes.
                        raise _Abandon
                    return finish(made, faults), faults
            except _Abandon:
                return None, faults
    except IntegrityError as error:
        raise_if_raced(error, race_constraints)


def create_once(
    *,
    key: str,
    fingerprint: str,
    reference: str,
    target: str,
    race_constraints: set[str],
    dedupe: Callable[[], Answer | None],
    settle: Callable[[AppliedFaults], T],
    finish: Callable[[T, AppliedFaults], Answer],
) -> Answer:
    """Carry out a money-moving request once per key and once per merchant reference.

    ``dedupe`` answers from an existing row for ``reference`` (or None: it is new);
    ``settle`` moves the money and inserts the row; ``finish`` stores the answer
    (record_insert) and schedules what the row sends. All of it commits as one
    transaction, retried when it loses a race on ``race_constraints``; then the
    faults that misbehave after the commit (a 500, a late answer) apply.
    """
    for _ in range(MAX_RACE_RETRIES):
        try:
            answer, faults = _attempt(
                key=key,
                fingerprint=fingerprint,
                target=target,
                race_constraints=race_constraints,
                dedupe=dedupe,
                settle=settle,
                finish=finish,
            )
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
