"""What the story sees in the books after its requests: who settled, what shipped.

The only part of the story that reads the shop's database: the notification and
the shipment are background work no client is answered about, and who settled
the payment is told by the rows themselves, not assumed from the script.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.translation import gettext, gettext_noop

from callbacks.models import ProviderNotification
from demo.shop.story.report import TallyRow
from demo.shop.story.scene import Role, Scene
from operations.audit.run import audit_run
from orders.models import Order, Shipment
from payments.models import LedgerEntry, Payment, PaymentStatus
from payments.providers import ChargeStatus, ProviderOutcomeUnknown
from payments.providers.sandbox import SandboxProvider

POLL_S = 0.2


class Settler(enum.Enum):
    """Who moved the payment from unsettled to SUCCEEDED (exactly one of them did)."""

    # The values are marked for translation; ``Observed.settled_by`` tells them.
    PAY_REQUEST = gettext_noop("the pay request itself, with the provider's answer")
    RETRY_QUERY = gettext_noop("the same-key retry, which asked the provider about the attempt")
    NOTIFICATION = gettext_noop("the provider's notification")
    RECONCILER = gettext_noop("the reconciler, which asked the provider")
    NOBODY = gettext_noop("nobody yet")


# The requests whose fresh 200 means they settled it (when no notification did).
_SETTLING_ROLES = {
    Role.CLICK_ANSWER: Settler.PAY_REQUEST,
    Role.GATEWAY_RETRY: Settler.RETRY_QUERY,
    Role.RELOAD: Settler.RETRY_QUERY,
}


@dataclass
class Observed:
    settler: Settler = Settler.NOBODY
    notification_applied: bool = False
    notified_at_s: float | None = None
    tally: list[TallyRow] = field(default_factory=list)
    audit: Any | None = None
    audit_note: str = ""

    @property
    def settled_by(self) -> str:
        return gettext(self.settler.value)


def story_observe(scene: Scene) -> Observed:
    observed = Observed()
    payment = Payment.objects.filter(
        order__number=scene.order_number, status=PaymentStatus.SUCCEEDED
    ).first()
    if payment is not None:
        _notification(scene, payment, observed)
        observed.settler = _settler(scene, observed)
        settled_at_s = scene.seconds(payment.settled_at)
        if observed.settler is Settler.NOTIFICATION and observed.notified_at_s is not None:
            # One transaction writes the notification's row and the settlement, with
            # timestamps a hair apart in either order: the cause is told first.
            settled_at_s = max(settled_at_s, observed.notified_at_s)
        scene.record(
            Role.SETTLED,
            "shop",
            gettext("settles the payment: %(by)s") % {"by": observed.settled_by},
            result=gettext("payment %(status)s, order PAID, one ledger entry")
            % {"status": payment.status},
            at_s=settled_at_s,
        )
    _shipment(scene)
    return observed


def wait_for(scene: Scene, found: Callable[[], bool], *, extra_s: float = 0.0) -> bool:
    """Poll until ``found()`` or ``scene.wait_s`` (+ ``extra_s``) ran out; whether found."""
    deadline = time.monotonic() + scene.wait_s + extra_s
    while not found():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def _notification(scene: Scene, payment: Payment, observed: Observed) -> None:
    received = ProviderNotification.objects.filter(out_trade_no=payment.out_trade_no)
    if not wait_for(scene, received.exists):
        scene.record(
            Role.NOTIFICATION,
            "provider",
            gettext("sends its notification 3 times"),
            request="POST /api/v1/callbacks/sandbox/ x3",
            result=gettext("not received yet"),
        )
        return
    note = received.order_by("received_at").first()
    assert note is not None
    observed.notification_applied = note.outcome == "applied"
    observed.notified_at_s = scene.seconds(note.received_at)
    scene.record(
        Role.NOTIFICATION,
        "provider",
        gettext("sends its notification 3 times (one notify_id)"),
        request="POST /api/v1/callbacks/sandbox/ x3",
        result=gettext("%(outcome)s, answered %(status)s")
        % {"outcome": note.outcome, "status": note.response_status},
        at_s=observed.notified_at_s,
    )


def _settler(scene: Scene, observed: Observed) -> Settler:
    if observed.notification_applied:
        return Settler.NOTIFICATION
    for happening in sorted(scene.happenings, key=lambda h: h.at_s):
        answer = happening.answer
        fresh_200 = answer is not None and answer.status == 200 and not answer.replayed
        if happening.role in _SETTLING_ROLES and fresh_200:
            return _SETTLING_ROLES[happening.role]
    return Settler.RECONCILER


def _shipment(scene: Scene) -> None:
    shipped = Shipment.objects.filter(order__number=scene.order_number)
    arrived = wait_for(scene, shipped.exists)
    shipment = shipped.first()
    scene.record(
        Role.SHIPPED,
        "shop",
        gettext("fulfils the order"),
        request="Celery task fulfil_order, enqueued on commit",
        result=gettext("shipped once") if arrived else gettext("not shipped yet"),
        why=gettext(
            "One shipment per order by a unique index: however often the message is "
            "delivered, it ships once."
        )
        if arrived
        else gettext("No shipment within %(seconds)s s: is the worker running?")
        % {"seconds": f"{scene.wait_s:g}"},
        at_s=scene.seconds(shipment.created_at) if shipment is not None else None,
    )


def story_provider(scene: Scene) -> SandboxProvider:
    """The provider at the story's URL (an explicit --provider-url may differ from this
    process's PROVIDER_BASE_URL), for reading it and for the reconciler's steps."""
    return SandboxProvider(
        base_url=scene.provider_url,
        api_key=settings.PROVIDER_API_KEY,
        timeout_s=settings.PROVIDER_TIMEOUT_S,
        webhook_secrets=[],  # it only reads and refunds; it verifies no notification
    )


def story_books(scene: Scene, observed: Observed, *, later: list[TallyRow], charges: int) -> None:
    """The tally of what the story did, and the audit. ``later``: the second chapter's
    rows; ``charges``: how many charges the provider should have captured in all."""
    order = Order.objects.get(number=scene.order_number)
    provider = story_provider(scene)
    try:
        wallet = provider.wallet(payer=scene.customer)
    except ProviderOutcomeUnknown:
        wallet = None
    captured = [c for c in wallet.charges if c.status is ChargeStatus.SUCCESS] if wallet else []
    net = wallet.charged_total - wallet.refunded_total if wallet else 0
    observed.tally = [
        TallyRow(
            gettext("paid orders"), Order.objects.filter(pk=order.pk, status="PAID").count(), 1
        ),
        TallyRow(
            gettext("capture ledger entries (debits)"),
            LedgerEntry.objects.filter(order=order, kind=LedgerEntry.Kind.CAPTURE).count(),
            1,
        ),
        TallyRow(gettext("shipments"), Shipment.objects.filter(order=order).count(), 1),
        *later,
        TallyRow(gettext("successful charges at the provider"), len(captured), charges),
        TallyRow(gettext("provider: charged - refunded"), net, order.amount, order.currency),
    ]
    try:
        observed.audit = audit_run(provider=provider)
    except Exception as error:  # said in words; the tally above still stands
        observed.audit_note = gettext("The audit could not run: %(error)s") % {
            "error": type(error).__name__
        }
