"""Charges and closes: the provider's money-moving actions.

- A charge, its wallet debit, its idempotency record and its notification rows
  commit in ONE transaction. Whatever a fault does afterwards (answer 500, answer
  late), a retry with the same key replays what was committed.
- Dedupe never trusts a prior read: the unique constraints on ``out_trade_no``
  and on the key are the arbiters, and losing a race on them (IntegrityError) is
  a named outcome that sends the request back to the replay/dedupe path.
- Money moves by conditional UPDATE (``balance >= amount``), never by reading a
  balance into Python and writing it back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from sandbox.errors import (
    ChargeAlreadySucceeded,
    IdempotencyKeyMismatch,
    OutTradeNoMismatch,
    ProviderError,
)
from sandbox.models import Charge, IdempotencyRecord, Wallet
from sandbox.serializers import charge_json
from sandbox.services.faults import NO_FAULTS, AppliedFaults, fault_take_for_charge
from sandbox.services.notifications import notifications_schedule

logger = logging.getLogger(__name__)

# Losing a race sends a request back to the replay/dedupe path, where it finds the
# winner's committed row; a third loss in a row would mean a bug, not bad luck.
MAX_RACE_RETRIES = 3
DECLINE_INSUFFICIENT_FUNDS = "insufficient_funds"
DECLINE_SCRIPTED = "do_not_honor"  # what a card network says when it gives no reason


# --- Values ------------------------------------------------------------------------


@dataclass(frozen=True)
class ChargeTerms:
    """The charge request body, validated."""

    out_trade_no: str
    amount: int
    currency: str
    payer: str
    notify_url: str

    @property
    def fingerprint(self) -> str:
        # Canonical JSON of the validated terms: key order and whitespace of the
        # raw body do not make a different request; any value does.
        canonical = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class ChargeAnswer:
    body: dict[str, Any]
    replayed: bool


class _Raced(Exception):
    """A concurrent request committed the same out_trade_no or key first."""


class _AbandonCharge(Exception):
    """error_before_commit: undo the charge, keep the consumed fault count."""


# --- Helpers -------------------------------------------------------------------------


def _new_trade_no() -> str:
    # 80 random bits: a collision is negligible, and the unique index refuses one anyway.
    return "T" + secrets.token_hex(10).upper()


def _violated_constraint(error: IntegrityError) -> str | None:
    diag = getattr(error.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None)


# --- Wallets -----------------------------------------------------------------------------


def _wallet_get_or_create(*, payer: str) -> Wallet:
    # ON CONFLICT DO NOTHING: if a concurrent request is creating the same wallet,
    # the INSERT waits for it and then does nothing; the SELECT sees its row.
    Wallet.objects.bulk_create(
        [Wallet(payer=payer, balance=settings.SANDBOX_WALLET_START)], ignore_conflicts=True
    )
    return Wallet.objects.get(payer=payer)


def _wallet_debit(*, wallet: Wallet, amount: int) -> bool:
    """Take ``amount`` if the balance covers it. False (nothing taken) otherwise."""
    return bool(
        Wallet.objects.filter(pk=wallet.pk, balance__gte=amount).update(
            balance=F("balance") - amount, charged_total=F("charged_total") + amount
        )
    )


# --- Charges -----------------------------------------------------------------------------


def _settle(*, terms: ChargeTerms, faults: AppliedFaults) -> Charge:
    """Decide the outcome, move the money, and write the charge row: all or nothing."""
    wallet = _wallet_get_or_create(payer=terms.payer)
    status, reason = Charge.Status.SUCCESS, None
    paid_at: datetime | None = timezone.now()
    if faults.decline:
        status, reason, paid_at = Charge.Status.DECLINED, DECLINE_SCRIPTED, None
    elif not _wallet_debit(wallet=wallet, amount=terms.amount):
        status, reason, paid_at = Charge.Status.DECLINED, DECLINE_INSUFFICIENT_FUNDS, None
    # Inserted after the debit: if a concurrent request already holds this
    # out_trade_no, the INSERT waits for it and raises, and the savepoint takes
    # our debit back with it.
    return Charge.objects.create(
        trade_no=_new_trade_no(),
        out_trade_no=terms.out_trade_no,
        status=status,
        wallet=wallet,
        amount=terms.amount,
        currency=terms.currency,
        notify_url=terms.notify_url,
        decline_reason=reason,
        paid_at=paid_at,
    )


def _record_insert(*, key: str, fingerprint: str, charge: Charge, body: dict[str, Any]) -> None:
    IdempotencyRecord.objects.create(
        key=key, fingerprint=fingerprint, charge=charge, response_status=200, response_body=body
    )


def _dedupe(*, key: str, terms: ChargeTerms, existing: Charge) -> ChargeAnswer:
    """A new key for an attempt the provider already holds: answer with that charge."""
    if existing.status != Charge.Status.CLOSED and (
        existing.amount != terms.amount
        or existing.currency != terms.currency
        or existing.payer != terms.payer
    ):
        # Never merge: a second request for the same attempt with other terms is a bug
        # on the merchant's side, and charging either amount would be a guess.
        raise OutTradeNoMismatch(trade_no=existing.trade_no)
    body = charge_json(existing)
    # Stored too, so this key now replays like any other (and 422s on other terms).
    _record_insert(key=key, fingerprint=terms.fingerprint, charge=existing, body=body)
    return ChargeAnswer(body=body, replayed=False)


# Losing one of these is losing a race to a request that committed first.
_RACE_CONSTRAINTS = {"sandbox_charge_out_trade_no_unique", "sandbox_idempotency_key_unique"}


def _charge_once(*, key: str, terms: ChargeTerms) -> tuple[ChargeAnswer | None, AppliedFaults]:
    """One attempt inside one transaction. None as the answer: error_before_commit."""
    try:
        with transaction.atomic():
            # Fast paths first, so replays and dedupes never touch the fault rows.
            # These reads decide nothing on their own: if they miss a row that a
            # concurrent request is committing, the INSERTs below collide with it
            # (IntegrityError -> _Raced) and the caller comes back here.
            record = IdempotencyRecord.objects.filter(key=key).first()
            if record is not None:
                if record.fingerprint != terms.fingerprint:
                    raise IdempotencyKeyMismatch()
                return ChargeAnswer(body=record.response_body, replayed=True), NO_FAULTS
            existing = (
                Charge.objects.select_related("wallet")
                .filter(out_trade_no=terms.out_trade_no)
                .first()
            )
            if existing is not None:
                return _dedupe(key=key, terms=terms, existing=existing), NO_FAULTS

            # Consumed in the outer transaction: if we lose a race below, all of it
            # rolls back and the counts stay for the charges that really are new.
            # If error_before_commit fires, only the savepoint rolls back and the
            # consumed count commits (else the retry would fail again, forever).
            faults = fault_take_for_charge()
            try:
                with transaction.atomic():  # savepoint: the charge and all it implies
                    charge = _settle(terms=terms, faults=faults)
                    if faults.fail_before_commit:
                        # After the INSERT on purpose: only a charge that would really
                        # have been made fails; a duplicate still takes the dedupe path.
                        raise _AbandonCharge
                    body = charge_json(charge)
                    _record_insert(key=key, fingerprint=terms.fingerprint, charge=charge, body=body)
                    notifications_schedule(charge=charge, faults=faults)
            except _AbandonCharge:
                return None, faults
            return ChargeAnswer(body=body, replayed=False), faults
    except IntegrityError as error:
        if _violated_constraint(error) in _RACE_CONSTRAINTS:
            raise _Raced from error
        raise


def charge_create(
    *,
    idempotency_key: str,
    out_trade_no: str,
    amount: int,
    currency: str,
    payer: str,
    notify_url: str,
) -> ChargeAnswer:
    """Charge ``payer`` once per key and once per ``out_trade_no``; replay afterwards.

    Raises 422 on a key or out_trade_no reused with other terms, and the
    ``provider-error`` 500 when a scripted fault says so (before or after commit).
    """
    terms = ChargeTerms(
        out_trade_no=out_trade_no,
        amount=amount,
        currency=currency,
        payer=payer,
        notify_url=notify_url,
    )
    for _ in range(MAX_RACE_RETRIES):
        try:
            answer, faults = _charge_once(key=idempotency_key, terms=terms)
            break
        except _Raced:
            continue  # the winner has committed: the next pass replays or dedupes
    else:
        raise RuntimeError(f"charge {out_trade_no!r} lost {MAX_RACE_RETRIES} races in a row")

    # Everything below happens after the commit: the provider's truth is settled,
    # only the answer on the wire misbehaves.
    if faults != NO_FAULTS:
        logger.info("sandbox faults for %s: %s", out_trade_no, faults)
    if faults.delay_s:
        # The merchant's read timeout fires first; the charge is already made.
        time.sleep(faults.delay_s)
    if answer is None or faults.fail_after_commit:
        raise ProviderError()
    return answer


def charge_close(*, out_trade_no: str) -> Charge:
    """Fence an attempt: after this no charge for ``out_trade_no`` can succeed.

    No charge yet: a CLOSED row takes the out_trade_no, so a later charge dedupes
    onto it. CLOSED or DECLINED already: returned as is (closing twice is fine).
    SUCCESS: 409, with the charge, because the money has moved.
    """
    try:
        with transaction.atomic():
            # If a charge for this attempt is being committed right now, this INSERT
            # waits on its unique index entry: exactly one of the two wins.
            return Charge.objects.create(
                trade_no=_new_trade_no(), out_trade_no=out_trade_no, status=Charge.Status.CLOSED
            )
    except IntegrityError as error:
        if _violated_constraint(error) != "sandbox_charge_out_trade_no_unique":
            raise
    # A charge's row never changes once written, so reading it without a lock is exact.
    charge = Charge.objects.select_related("wallet").get(out_trade_no=out_trade_no)
    if charge.status == Charge.Status.SUCCESS:
        body = charge_json(charge)
        # problem+json's own ``status`` is the HTTP status (409), so the charge's
        # fields go in flat with its status as ``trade_status``, and once more whole
        # under ``charge``, in the exact shape every other answer has.
        fields = {name: value for name, value in body.items() if name != "status"}
        raise ChargeAlreadySucceeded(trade_status=body["status"], charge=body, **fields)
    return charge
