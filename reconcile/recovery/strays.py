"""Captures no attempt of ours recorded: confirmed by asking, then refunded.

The shop commits its payment attempt before it asks the provider to charge, so
a capture the provider holds that no attempt recorded is not ours to keep: a
record lost to a restore, a charge made by hand in the provider's dashboard
(naming no reference of ours), a second PaymentIntent naming the reference of
an attempt that has its own capture. The statement finds it, or a notification
names it, by the provider's id of the charge (``trade_no``), which is how the
provider is asked about it and how it is refunded: never through an attempt
row, which there is none of (or one about another charge). Nothing is taken on
their word: the provider's query must confirm the capture, and its answer is
what we book and refund. The refund reference and its provider key are
derived from the provider's charge (and the attempt's number), so however
often this runs — two importers, a rerun, a crash and a retry — the provider
refunds it once.

A declined refund is final at the provider for its reference, yet the money
must still go back: after the reconciler's backoff from the decline, the next
attempt takes the next reference (``stray_refund_restart``, a conditional
update, so two runners start it once: ``stray_retries.py``) and is sent like the
first, until one succeeds. Declined is final for a reference, not for the money: a provider may
carry a declined refund out later. Every reference a stray ever used is
derivable (``stray_refund_nos``), so before a new attempt starts, and before
a later one is sent, the provider is asked about the earlier ones; a statement
line or a notification about any of them finds its stray
(``stray_by_refund_no``); and the stray's own notifications (its charge, each
refund's) are resolved once the money is back.
"""

from __future__ import annotations

import hashlib
import logging
import re
from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, Q
from django.urls import reverse
from django.utils import timezone

from callbacks.models import ProviderNotification
from payments.models import Payment, RefundAttemptStatus
from payments.providers import (
    ChargeStatus,
    PaymentProvider,
    ProviderOutcomeUnknown,
    ProviderRejected,
    RefundResult,
    RefundStatus,
)
from reconcile.models import StrayCapture
from reconcile.recovery.claims import reconcile_backoff_s

logger = logging.getLogger(__name__)

# Our references are at most 64 characters, like the provider's.
_MAX_REFERENCE = 64
# What stray_refund_no appends from the second attempt on.
_ATTEMPT_SUFFIX = re.compile(r"-\d+$")


def stray_refund_no(trade_no: str, attempt: int = 1) -> str:
    """Our reference for refund attempt ``attempt`` of a stray capture: derived from
    the provider's charge (``S<trade_no>``, then ``S<trade_no>-2``, ...)."""
    suffix = "" if attempt == 1 else f"-{attempt}"
    derived = f"S{trade_no}{suffix}"
    if len(derived) <= _MAX_REFERENCE:
        return derived
    return "S" + hashlib.sha256(trade_no.encode()).hexdigest()[:40] + suffix


def stray_refund_nos(stray: StrayCapture) -> list[str]:
    """Every refund reference the stray capture ever used, oldest first: derived, so
    nothing needs recording (attempt ``refund_attempts`` is the latest)."""
    return [stray_refund_no(stray.trade_no, n) for n in range(1, stray.refund_attempts + 1)]


def stray_by_refund_no(*, provider: str, refund_no: str) -> StrayCapture | None:
    """The stray capture one of whose refund attempts used ``refund_no``, or None.

    All references of a stray share the first one's stem (``S<trade_no>`` or its
    hash), and its row holds one of them, so the candidates are the strays whose
    reference starts with the stem (one, as a rule); the derivation decides.
    """
    stem = _ATTEMPT_SUFFIX.sub("", refund_no)
    candidates = StrayCapture.objects.filter(provider=provider, refund_no__startswith=stem)
    return next((s for s in candidates if refund_no in stray_refund_nos(s)), None)


def stray_refund_find_late(
    *, stray: StrayCapture, provider: PaymentProvider, earlier_only: bool = False
) -> bool:
    """Ask the provider about every refund reference of the stray (``earlier_only``:
    all but the latest); if it carried one out (a declined one, later), record that
    as the stray's refund. True if refunded.

    Declined is final for a reference, not for the money: a provider may carry a
    declined refund out later. Raises ProviderOutcomeUnknown (nothing guessed).
    """
    if stray.refund_status == RefundAttemptStatus.SUCCEEDED:
        return True
    references = stray_refund_nos(stray)
    for refund_no in references[:-1] if earlier_only else references:
        account = provider.query_refund(out_refund_no=refund_no, trade_no=stray.trade_no)
        if (
            account is None
            or account.status is not RefundStatus.SUCCESS
            or account.out_refund_no != refund_no
            or account.out_trade_no != stray.out_trade_no
        ):
            continue
        now = timezone.now()
        # Conditional, like _settle: of two runners, one records it; a SUCCEEDED
        # refund is final. The reference becomes the one that was carried out.
        StrayCapture.objects.filter(pk=stray.pk).exclude(
            refund_status=RefundAttemptStatus.SUCCEEDED
        ).update(
            refund_no=refund_no,
            refund_status=RefundAttemptStatus.SUCCEEDED,
            refund_id=account.refund_id,
            failure_code="",
            refunded_at=now,
            next_refund_at=None,
        )
        stray.refresh_from_db()
        logger.warning("stray refund %s: declined, then carried out late", refund_no)
        stray_notifications_resolve()
        return stray.refund_status == RefundAttemptStatus.SUCCEEDED
    return False


def capture_is_an_attempts_own(*, out_trade_no: str, trade_no: str) -> bool:
    """An attempt of ours holds (or may yet hold) this capture: the attempt's own
    reconciliation settles it, never the strays. Another capture naming the
    reference of an attempt that recorded its own is a stray."""
    payment = Payment.objects.filter(out_trade_no=out_trade_no).first() if out_trade_no else None
    return payment is not None and payment.trade_no in (None, "", trade_no)


def stray_capture_take(
    *, out_trade_no: str, trade_no: str, provider: PaymentProvider
) -> StrayCapture | None:
    """Book the capture ``trade_no`` as stray and refund it, if the provider confirms it.

    None: the capture is an attempt's own (``capture_is_an_attempts_own``: the
    provider is not asked), or the provider does not confirm a capture
    ``trade_no`` naming ``out_trade_no`` (nothing is booked: a discrepancy for a
    person). For a reference an attempt of ours recorded another capture of, the
    provider must confirm that one too: two captures, never a record of ours
    that simply disagrees with the provider (a person's, not a refund).
    Raises ProviderOutcomeUnknown.
    """
    if capture_is_an_attempts_own(out_trade_no=out_trade_no, trade_no=trade_no):
        return None
    if not _recorded_capture_confirmed(out_trade_no=out_trade_no, provider=provider):
        return None
    account = provider.query(out_trade_no=out_trade_no, trade_no=trade_no)
    if (
        account is None
        or account.status is not ChargeStatus.SUCCESS
        or account.trade_no != trade_no
        or account.amount is None
        or account.currency is None
    ):
        logger.error(
            "stray %s: the provider does not confirm %s: %s", out_trade_no, trade_no, account
        )
        return None
    # The unique constraints decide between two runners: one row, whoever inserts it.
    StrayCapture.objects.bulk_create(
        [
            StrayCapture(
                provider=provider.name,
                out_trade_no=out_trade_no,
                trade_no=trade_no,
                amount=account.amount,
                currency=account.currency,
                refund_no=stray_refund_no(trade_no),
            )
        ],
        ignore_conflicts=True,
    )
    stray = StrayCapture.objects.get(provider=provider.name, trade_no=trade_no)
    logger.warning(
        "stray capture %s of %s %s for unknown reference %s: refunding it",
        trade_no,
        stray.amount,
        stray.currency,
        out_trade_no,
    )
    stray_refund(stray=stray, provider=provider)
    return stray


def _recorded_capture_confirmed(*, out_trade_no: str, provider: PaymentProvider) -> bool:
    """No attempt of ours uses the reference, or the provider confirms the capture the
    attempt recorded (so another one naming the reference is a second capture)."""
    payment = Payment.objects.filter(out_trade_no=out_trade_no).first() if out_trade_no else None
    if payment is None:
        return True
    ours = provider.query(out_trade_no=out_trade_no, trade_no=payment.trade_no)
    confirmed = (
        ours is not None
        and ours.status is ChargeStatus.SUCCESS
        and ours.trade_no == payment.trade_no
    )
    if not confirmed:
        logger.error(
            "%s: the provider does not confirm our capture %s (%s): not a stray",
            out_trade_no,
            payment.trade_no,
            ours,
        )
    return confirmed


def stray_refund(*, stray: StrayCapture, provider: PaymentProvider) -> str:
    """Get the stray capture's money back to the payer; its refund status after this try.

    Asks first (a send from an earlier try may have got there), then sends with
    the derived key; an unreachable provider leaves it UNKNOWN for the next run,
    a decline FAILED until its backoff is over and the next attempt starts.
    """
    if stray.refund_status in (RefundAttemptStatus.SUCCEEDED, RefundAttemptStatus.FAILED):
        # Final for this reference; a declined one's next attempt is stray_refund_restart's.
        return stray.refund_status
    try:
        if stray_refund_find_late(stray=stray, provider=provider, earlier_only=True):
            # An earlier, declined attempt was carried out late: this one is never
            # sent (or, sent already, the provider declines it: nothing is left).
            return RefundAttemptStatus.SUCCEEDED
        account = provider.query_refund(out_refund_no=stray.refund_no, trade_no=stray.trade_no)
        if account is None:
            account = provider.refund(
                out_refund_no=stray.refund_no,
                out_trade_no=stray.out_trade_no,
                amount=stray.amount,
                notify_url=settings.SHOP_BASE_URL + reverse(provider.callback_route),
                idempotency_key=f"onceshop-{stray.refund_no}",
                trade_no=stray.trade_no,
            )
    except ProviderRejected as error:
        _settle(stray=stray, status=RefundAttemptStatus.FAILED, code=error.code or "rejected")
        return RefundAttemptStatus.FAILED
    except ProviderOutcomeUnknown as error:
        logger.warning("stray refund %s: provider unreachable (%s)", stray.refund_no, error)
        _settle(stray=stray, status=RefundAttemptStatus.UNKNOWN)
        return RefundAttemptStatus.UNKNOWN
    return _apply(stray=stray, account=account)


def _apply(*, stray: StrayCapture, account: RefundResult) -> str:
    if account.out_refund_no != stray.refund_no or account.out_trade_no != stray.out_trade_no:
        logger.error("stray refund %s: answer about another refund: %s", stray.refund_no, account)
        return stray.refund_status
    if account.status is RefundStatus.SUCCESS:
        _settle(stray=stray, status=RefundAttemptStatus.SUCCEEDED, refund_id=account.refund_id)
        stray_notifications_resolve()
        return RefundAttemptStatus.SUCCEEDED
    _settle(stray=stray, status=RefundAttemptStatus.FAILED, code=account.decline_reason or "")
    return RefundAttemptStatus.FAILED


def _settle(
    *, stray: StrayCapture, status: str, refund_id: str | None = None, code: str = ""
) -> None:
    # Conditional: a SUCCEEDED refund is final, whatever a slower runner saw; and an
    # answer about attempt n never settles attempt n + 1 another runner started.
    now = timezone.now()
    StrayCapture.objects.filter(pk=stray.pk, refund_no=stray.refund_no).exclude(
        refund_status=RefundAttemptStatus.SUCCEEDED
    ).update(
        refund_status=status,
        refund_id=refund_id,
        failure_code=code[:64],
        refunded_at=now if status == RefundAttemptStatus.SUCCEEDED else None,
        next_refund_at=(
            now + timedelta(seconds=reconcile_backoff_s(stray.refund_attempts))
            if status == RefundAttemptStatus.FAILED
            else None
        ),
    )
    stray.refresh_from_db()


def stray_notifications_resolve() -> int:
    """Resolve unmatched notifications about stray captures whose refund succeeded.

    They named a capture no attempt of ours recorded (its charge by the
    provider's id, its refunds by our reference for them, either by the
    reference the charge names when it names one); the statement (or the
    provider's query) showed the capture, and it went back: that is the
    resolution, recorded on each. One UPDATE, whatever the number.
    """
    refunded = StrayCapture.objects.filter(refund_status=RefundAttemptStatus.SUCCEEDED)
    named = (
        Q(trade_no__in=refunded.exclude(trade_no="").values("trade_no"))
        | Q(out_refund_no__in=refunded.values("refund_no"))
        | Q(Exists(refunded.filter(out_trade_no=OuterRef("out_trade_no")).exclude(out_trade_no="")))
    )
    return (
        ProviderNotification.objects.filter(
            outcome=ProviderNotification.Outcome.UNMATCHED, resolved_at__isnull=True
        )
        .filter(named)
        .update(
            resolved_at=timezone.now(),
            resolution="stray capture (no attempt of ours): confirmed by the provider, refunded",
        )
    )
