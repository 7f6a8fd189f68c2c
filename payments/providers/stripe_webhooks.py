"""Stripe's webhook signature, checked by the SDK's own verification (stripe.Webhook).

``Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>`` over ``"<t>.<raw body>"``;
during a secret roll Stripe sends one ``v1`` per live secret, and the SDK accepts
the event when any of them is ours.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import stripe

from payments.providers.base import NotificationMalformed, NotificationSignatureInvalid
from payments.providers.stripe_calls import plain

SIGNATURE_HEADER = "Stripe-Signature"
SIGNATURE_TOLERANCE_S = 300  # Stripe's own default: a replayed webhook older than this is refused


def verified_event(headers: Mapping[str, str], raw_body: bytes, *, secret: str) -> Any:
    """The event as plain data, once the SDK has verified its signature (300 s tolerance).

    Raises NotificationSignatureInvalid (unsigned, forged, stale) or
    NotificationMalformed (signed, but not JSON).
    """
    signature = headers.get(SIGNATURE_HEADER)
    if not signature:
        raise NotificationSignatureInvalid(f"no {SIGNATURE_HEADER} header")
    try:
        event = stripe.Webhook.construct_event(
            raw_body, signature, secret, tolerance=SIGNATURE_TOLERANCE_S
        )
    except stripe.SignatureVerificationError as error:
        raise NotificationSignatureInvalid(str(error)) from error
    except ValueError as error:  # signed, but not JSON
        raise NotificationMalformed(str(error)) from error
    return plain(event)
