"""Planting what a statement must find, through the sandbox and the ledger."""

from __future__ import annotations

import uuid
from datetime import date

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from callbacks.models import ProviderNotification
from operations.audit.checks import statements as statement_checks
from operations.audit.findings import Finding
from operations.audit.run import audit_run
from payments.models import Payment
from payments.providers import get_provider
from payments.services import provider_idempotency_key

STATEMENT_INVARIANTS = {
    statement_checks.DISCREPANCY_RESOLVED,
    statement_checks.STATEMENT_IMPORTED,
    statement_checks.LINE_MATCHED,
    statement_checks.STRAY_REFUNDED,
}


def today() -> date:
    return timezone.now().date()


def stray_charge(user: User, *, amount: int = 777) -> tuple[str, str]:
    """A capture at the provider for a reference the shop never wrote (its record
    lost), whose notification never arrives: (out_trade_no, trade_no)."""
    out_trade_no = f"P-LOST-{uuid.uuid4().hex[:12]}"
    result = get_provider().charge(
        out_trade_no=out_trade_no,
        amount=amount,
        currency="CNY",
        payer=user.username,
        notify_url=f"{settings.SHOP_BASE_URL}/nowhere/",
        idempotency_key=f"hand-{out_trade_no}",
    )
    assert result.status == "SUCCESS"
    assert result.trade_no
    assert not Payment.objects.filter(out_trade_no=out_trade_no).exists()
    return out_trade_no, result.trade_no


def charge_at_provider(payment: Payment, *, amount: int) -> None:
    """The provider captures ``amount`` for our attempt (with its derived key), and we
    never hear of it."""
    get_provider().charge(
        out_trade_no=payment.out_trade_no,
        amount=amount,
        currency=payment.currency,
        payer=payment.payer,
        notify_url=f"{settings.SHOP_BASE_URL}/nowhere/",
        idempotency_key=provider_idempotency_key(payment),
    )


def statement_findings() -> list[Finding]:
    return [f for f in audit_run().findings if f.invariant in STATEMENT_INVARIANTS]


def unresolved_notifications() -> int:
    return ProviderNotification.objects.filter(
        outcome__in=["deferred", "rejected", "unmatched"], resolved_at__isnull=True
    ).count()
