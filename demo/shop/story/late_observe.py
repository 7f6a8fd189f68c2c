"""What became of the late capture: read from the rows, never assumed from the script.

The provider's capture (its own account, by query), the shop's notification
row, the attempt's status and ledger entries, the automatic refund: each is
told at the time its row says, with what it says. Where the reconciler has not
got to it yet (it waits ``RECONCILE_AFTER_S`` before touching an attempt, a
minute by default), the story runs the reconciler's own two steps for this one
attempt, as ``make reconcile`` would once that minute is up, and says so.
"""

from __future__ import annotations

from django.conf import settings
from django.utils.translation import get_language, gettext, gettext_noop

from callbacks.models import ProviderNotification
from demo.shop.story.late_success import LATE_BY_S, LateAttempt
from demo.shop.story.observe import story_provider, wait_for
from demo.shop.story.report import TallyRow
from demo.shop.story.scene import Role, Scene
from edge.money import money
from payments.models import LedgerEntry, Payment, PaymentStatus, Refund, RefundAttemptStatus
from payments.providers import ChargeStatus, PaymentProvider, ProviderOutcomeUnknown
from reconcile.recovery.notifications import notification_resolve
from reconcile.recovery.unsettled_refunds import refund_reconcile

BY_THE_STORY = gettext_noop(
    "The reconciler takes an attempt once it is older than RECONCILE_AFTER_S "
    "(%(after)s s); the story runs its step for this one now, as `make reconcile` would then."
)


def late_observe(scene: Scene, late: LateAttempt) -> list[TallyRow]:
    provider = story_provider(scene)
    payment = Payment.objects.get(out_trade_no=late.out_trade_no)
    notified = ProviderNotification.objects.filter(
        out_trade_no=late.out_trade_no, trade_status="SUCCESS"
    )
    # The capture happens LATE_BY_S after the decline, then the worker notifies.
    found = wait_for(scene, notified.exists, extra_s=LATE_BY_S)
    _capture(scene, provider, late)
    if not found:
        scene.record(
            Role.LATE_NOTIFICATION,
            "provider",
            gettext("notifies the late success"),
            result=gettext("not received yet"),
            why=gettext(
                "Nothing arrived in time: is the worker running (it runs the provider's "
                "late success and its notification)?"
            ),
        )
        return _tally(scene, late, payment)
    note = notified.order_by("received_at").first()
    assert note is not None
    _notification(scene, note)
    _orphan_booked(scene, provider, note, payment)
    _orphan_refunded(scene, provider, payment)
    return _tally(scene, late, payment)


def _capture(scene: Scene, provider: PaymentProvider, late: LateAttempt) -> None:
    try:
        account = provider.query(out_trade_no=late.out_trade_no)
    except ProviderOutcomeUnknown:
        account = None
    if account is None or account.status is not ChargeStatus.SUCCESS:
        return  # told by the notification's absence; the provider has not captured
    at_s = scene.seconds(account.paid_at)
    scene.record(
        Role.LATE_CAPTURE,
        "provider",
        gettext("captures the money after all: the payer confirmed late"),
        request=f"GET /sandbox/v1/charges/{late.out_trade_no} (the provider's own account)",
        result=f"{account.status} {account.trade_no}, {_money(account.amount, account.currency)}",
        why=gettext("The decline was not final for the payer: the wallet is debited now, %(when)s.")
        % {"when": _against_the_cancel(scene, at_s)},
        at_s=at_s,
    )


def _money(amount: int | None, currency: str | None) -> str:
    """An amount in the reader's language, as the pages write it."""
    return money(amount, currency, language=get_language() or "en")


def _against_the_cancel(scene: Scene, at_s: float) -> str:
    """When something happened, told against the customer's cancel (as the rows time it)."""
    cancel = next((h for h in scene.happenings if h.role is Role.GIVE_UP), None)
    if cancel is None or at_s >= cancel.at_s:
        return gettext("after the customer cancelled the order")
    return gettext("before the customer's cancel reached the shop")


def _notification(scene: Scene, note: ProviderNotification) -> None:
    deferred = note.outcome == ProviderNotification.Outcome.DEFERRED
    at_s = scene.seconds(note.received_at)
    scene.record(
        Role.LATE_NOTIFICATION,
        "provider",
        gettext("notifies the shop of the late success"),
        request="POST /api/v1/callbacks/sandbox/",
        result=gettext("%(outcome)s, answered %(status)s")
        % {"outcome": note.outcome, "status": note.response_status},
        why=gettext(
            "It came %(when)s. The shop never moves a state backwards: a success for an "
            "attempt it already failed is recorded as deferred and answered, so the provider "
            "stops sending it. Not a dead end: the reconciler asks the provider about it."
        )
        % {"when": _against_the_cancel(scene, at_s)}
        if deferred
        else gettext("Recorded as %(outcome)s.") % {"outcome": note.outcome},
        at_s=at_s,
    )


def _orphan_booked(
    scene: Scene, provider: PaymentProvider, note: ProviderNotification, payment: Payment
) -> None:
    ran_here = note.resolved_at is None
    if ran_here:
        notification_resolve(notification=note, provider=provider)
        note.refresh_from_db()
    payment.refresh_from_db()
    capture = LedgerEntry.objects.filter(payment=payment, kind=LedgerEntry.Kind.ORPHAN_CAPTURE)
    booked = capture.first()
    refund = Refund.objects.filter(payment=payment, order__isnull=True).first()
    started = (
        gettext(", automatic refund %(refund)s started") % {"refund": refund.refund_no}
        if refund is not None
        else ""
    )
    scene.record(
        Role.ORPHAN_BOOKED,
        "reconciler",
        gettext("asks the provider about the attempt the notification names"),
        request=f"query {payment.out_trade_no}",
        result=gettext("payment %(status)s") % {"status": payment.status}
        + (f" ({payment.failure_code})" if payment.failure_code else "")
        + (
            gettext(", capture booked as %(kind)s") % {"kind": booked.kind}
            if booked is not None
            else ""
        )
        + started,
        why=(_by_the_story() + " " if ran_here else "")
        + gettext(
            "The provider's answer is the truth: %(resolution)s. The order cannot take the "
            "money, so the capture is booked apart from it and given back."
        )
        % {"resolution": note.resolution or gettext("not resolved")},
        at_s=scene.seconds(booked.created_at if booked is not None else None),
    )


def _orphan_refunded(scene: Scene, provider: PaymentProvider, payment: Payment) -> None:
    refund = Refund.objects.filter(payment=payment, order__isnull=True).first()
    if refund is None:
        return
    ran_here = refund.status in (RefundAttemptStatus.PENDING, RefundAttemptStatus.UNKNOWN)
    if ran_here:
        refund_reconcile(refund=refund, provider=provider)
        refund.refresh_from_db()
    entry = LedgerEntry.objects.filter(refund_attempt=refund).first()
    scene.record(
        Role.ORPHAN_REFUNDED,
        "reconciler",
        gettext("refunds the orphaned capture (%(reason)s)") % {"reason": refund.reason},
        request=f"POST /sandbox/v1/refunds out_refund_no {refund.refund_no}",
        result=gettext("refund %(status)s") % {"status": refund.status}
        + (
            gettext(", provider refund_id %(id)s") % {"id": refund.refund_id}
            if refund.refund_id
            else ""
        )
        + (gettext(", ledger entry %(kind)s") % {"kind": entry.kind} if entry is not None else ""),
        why=(_by_the_story() + " " if ran_here else "")
        + gettext(
            "It asks the provider first (query by out_refund_no), then refunds with a key "
            "derived from the attempt: however often this runs, the provider refunds it once."
        ),
        at_s=scene.seconds(refund.settled_at),
    )


def _by_the_story() -> str:
    return gettext(BY_THE_STORY) % {"after": settings.RECONCILE_AFTER_S}


def _tally(scene: Scene, late: LateAttempt, payment: Payment) -> list[TallyRow]:
    payment.refresh_from_db()
    refunded = Refund.objects.filter(
        payment=payment, order__isnull=True, status=RefundAttemptStatus.SUCCEEDED
    )
    return [
        TallyRow(
            gettext("orders cancelled after the decline"),
            int(
                Payment.objects.filter(
                    pk=payment.pk, order__number=late.order_number, order__status="CANCELLED"
                ).exists()
            ),
            1,
        ),
        TallyRow(
            gettext("late captures booked as orphaned"),
            int(payment.status == PaymentStatus.ORPHANED),
            1,
        ),
        TallyRow(gettext("orphaned captures refunded in full"), refunded.count(), 1),
    ]
