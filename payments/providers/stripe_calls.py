"""One call to Stripe through its SDK, its errors as the protocol's (payments/providers/stripe.py).

No answer, a 5xx, a 408/409/422, a 429 or an idempotency conflict is
ProviderOutcomeUnknown; any other 4xx carries Stripe's code as a refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import stripe

from payments.providers.base import ProviderOutcomeUnknown, ProviderRejected


def plain(answer: Any) -> Any:
    return answer.to_dict() if isinstance(answer, stripe.StripeObject) else answer


class Refused(ProviderRejected):
    """A 4xx with Stripe's error code that is not an outcome-unknown.

    A ProviderRejected, so a refusal no call site reads (the create's: an unknown
    payment method, a currency Stripe does not take) reaches the flow as the
    protocol's refusal, never as an error of its own.
    """


def call(request: Callable[[], Any]) -> Any:
    """One SDK call, its errors as the protocol's (see the module docstring); the
    object it returns as plain data (dicts and lists, as Stripe's JSON)."""
    try:
        return plain(request())
    except (stripe.APIConnectionError, stripe.RateLimitError, stripe.IdempotencyError) as error:
        raise ProviderOutcomeUnknown(f"Stripe: {type(error).__name__}: {error}") from error
    except stripe.StripeError as error:
        status = error.http_status
        if status is None or status >= 500 or status in (408, 409, 422) or error.json_body is None:
            raise ProviderOutcomeUnknown(f"Stripe: HTTP {status}: {error}") from error
        raise Refused(status, error.code or type(error).__name__) from error
