"""Reads of payments for the operators' gauges (docs/operating.md): indexed and cheap.

A scrape runs them every 15 seconds or so, and an unhealthy shop is exactly when
they must stay fast: they read the partial index of unsettled attempts
(``payment_unsettled_idx``), which holds only the work left to do.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Min
from django.utils import timezone

from payments.models import UNSETTLED_STATUSES, Payment


def _unresolved() -> dict[str, Any]:
    return Payment.objects.filter(status__in=UNSETTLED_STATUSES).aggregate(
        n=Count("id"), oldest=Min("created_at")
    )


def payments_unresolved() -> float:
    return float(_unresolved()["n"])


def payments_unresolved_oldest_age_s() -> float:
    oldest = _unresolved()["oldest"]
    return (timezone.now() - oldest).total_seconds() if oldest else 0.0
