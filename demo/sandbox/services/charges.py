"""Charges and closes: the provider's money-moving actions on payment attempts.

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

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from demo.sandbox.errors import ChargeAlreadySucceeded, ChargeNotFound, OutTradeNoMismatch
from demo.sandbox.models import Charge, Fault
from demo.sandbox.serializers import charge_json
from demo.sandbox.services.declines import (
    DECLINE_INSUFFICIENT_FUNDS,
    DECLINE_PENDING,
    DECLINE_SCRIPTED,
)
from demo.sandbox.services.disputes import dispute_schedule
from demo.sandbox.services.faults import AppliedFaults
from demo.sandbox.services.idempotency import (
    Answer,
    create_once,
    fingerprint,
    record_insert,
    violated_constraint,
)
from demo.sandbox.services.late_success import late_success_schedule
from demo.sandbox.services.notifications import charge_notifications_schedule
from demo.sandbox.services.wallets import wallet_debit, wallet_get_or_create
from edge.bounds import fits_column


@dataclass(frozen=True)
class ChargeTerms:
    """The charge request body, validated."""

    out_trade_no: str
    amount: int
    currency: str
    payer: str
    notify_url: str


def new_trade_no() -> str:
    # 80 random bits: a collision is negligible, and the unique index refuses one anyway.
    return "T" + secrets.token_hex(10).upper()


def new_client_secret() -> str:
    # 128 random bits: whoever holds it may complete the charge, as the payer.
    return "cs_" + secrets.token_hex(16)


def _settle(*, terms: ChargeTerms, faults: AppliedFaults) -> Charge:
    """Decide the outcome, move the money, and write the charge row: all or nothing."""
    wallet = wallet_get_or_create(payer=terms.payer)
    status, reason = Charge.Status.SUCCESS, None
    paid_at: datetime | None = timezone.now()
    late_success_at: datetime | None = None
    client_secret: str | None = None
    if faults.decline:
        status, reason, paid_at = Charge.Status.DECLINED, DECLINE_SCRIPTED, None
    elif faults.requires_action:
        # Waits for the customer, nothing debited (services.customer_action settles it).
        status, paid_at = Charge.Status.ACTION_REQUIRED, None
        client_secret = new_client_secret()
    elif faults.late_success_delay_s is not None:
        # Declined now, nothing debited; late_success_schedule succeeds it later.
        status, reason, paid_at = Charge.Status.DECLINED, DECLINE_PENDING, None
        late_success_at = timezone.now() + timedelta(seconds=faults.late_success_delay_s)
    elif not wallet_debit(wallet_id=wallet.pk, amount=terms.amount):
        status, reason, paid_at = Charge.Status.DECLINED, DECLINE_INSUFFICIENT_FUNDS, None
    # dispute_lost: a charge that went through is disputed later (services.disputes).
    disputes_at = (
        timezone.now() + timedelta(seconds=faults.dispute_delay_s)
        if status == Charge.Status.SUCCESS and faults.dispute_delay_s is not None
        else None
    )
    # Inserted after the debit: if a concurrent request already holds this
    # out_trade_no, the INSERT waits for it and raises, and the savepoint takes
    # our debit back with it.
    return Charge.objects.create(
        trade_no=new_trade_no(),
        out_trade_no=terms.out_trade_no,
        status=status,
        wallet=wallet,
        amount=terms.amount,
        currency=terms.currency,
        notify_url=terms.notify_url,
        decline_reason=reason,
        paid_at=paid_at,
        late_success_at=late_success_at,
        client_secret=client_secret,
        disputes_at=disputes_at,
    )


def _dedupe(*, key: str, terms: ChargeTerms) -> Answer | None:
    """A new key for a charge the provider already holds: answer with it (None: new)."""
    existing = (
        Charge.objects.select_related("wallet").filter(out_trade_no=terms.out_trade_no).first()
    )
    if existing is None:
        return None
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
    record_insert(key=key, fingerprint=fingerprint(terms), charge=existing, body=body)
    return Answer(body=body, replayed=False)


# Losing one of these is losing a race to a request that committed first.
_RACE_CONSTRAINTS = {"sandbox_charge_out_trade_no_unique", "sandbox_idempotency_key_unique"}


def _finish(*, key: str, terms: ChargeTerms, charge: Charge, faults: AppliedFaults) -> Answer:
    """Store the answer and schedule what the new charge sends (and its late success)."""
    body = charge_json(charge)
    record_insert(key=key, fingerprint=fingerprint(terms), charge=charge, body=body)
    if charge.status != Charge.Status.ACTION_REQUIRED:  # notified once the customer acted
        charge_notifications_schedule(charge=charge, faults=faults)
    if charge.late_success_at is not None:
        late_success_schedule(charge=charge)
    if charge.disputes_at is not None:
        dispute_schedule(charge=charge)
    return Answer(body=body, replayed=False)


def charge_create(
    *,
    idempotency_key: str,
    out_trade_no: str,
    amount: int,
    currency: str,
    payer: str,
    notify_url: str,
) -> Answer:
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
    return create_once(
        key=idempotency_key,
        fingerprint=fingerprint(terms),
        reference=out_trade_no,
        target=Fault.Target.CHARGE,
        race_constraints=_RACE_CONSTRAINTS,
        dedupe=lambda: _dedupe(key=idempotency_key, terms=terms),
        settle=lambda faults: _settle(terms=terms, faults=faults),
        finish=lambda charge, faults: _finish(
            key=idempotency_key, terms=terms, charge=charge, faults=faults
        ),
    )


def charge_close(*, out_trade_no: str) -> Charge:
    """Fence an attempt: after this no new charge for ``out_trade_no`` can succeed.

    The one exception is a late success already scheduled for a DECLINED charge
    (services.late_success): it still succeeds, as a real asynchronous payment
    does, and the merchant must account for that money (an orphaned capture).

    No charge yet: a CLOSED row takes the out_trade_no, so a later charge dedupes
    onto it. Waiting for the customer (ACTION_REQUIRED): CLOSED, by the same
    conditional UPDATE the customer's action races (one of the two wins).
    CLOSED or DECLINED already: returned as is (closing twice is fine).
    SUCCESS: 409, with the charge, because the money has moved.
    A reference no charge can have (longer than the column, NUL) is 404: there is
    nothing to fence, since no charge request with it can ever be accepted.
    """
    if not fits_column(Charge, "out_trade_no", out_trade_no):
        raise ChargeNotFound()
    try:
        with transaction.atomic():
            # If a charge for this attempt is being committed right now, this INSERT
            # waits on its unique index entry: exactly one of the two wins.
            return Charge.objects.create(
                trade_no=new_trade_no(), out_trade_no=out_trade_no, status=Charge.Status.CLOSED
            )
    except IntegrityError as error:
        if violated_constraint(error) != "sandbox_charge_out_trade_no_unique":
            raise
    Charge.objects.filter(out_trade_no=out_trade_no, status=Charge.Status.ACTION_REQUIRED).update(
        status=Charge.Status.CLOSED
    )
    # Read without a lock: a SUCCESS stays SUCCESS, and a DECLINED row that a late
    # success flips afterwards was truthfully DECLINED when read. Closing does not
    # stop a late success: see services.late_success.
    charge = Charge.objects.select_related("wallet").get(out_trade_no=out_trade_no)
    if charge.status == Charge.Status.SUCCESS:
        body = charge_json(charge)
        # problem+json's own ``status`` is the HTTP status (409), so the charge's
        # fields go in flat with its status as ``trade_status``, and once more whole
        # under ``charge``, in the exact shape every other answer has.
        fields = {name: value for name, value in body.items() if name != "status"}
        raise ChargeAlreadySucceeded(trade_status=body["status"], charge=body, **fields)
    return charge
