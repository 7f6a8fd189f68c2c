"""The ``Sandbox-Signature`` header of outgoing notifications: sign and verify.

Format (docs/design.md, "Callbacks")::

    Sandbox-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>[,v1=...]

The timestamp is inside the signed material, so a captured notification cannot
be replayed later with a fresh ``t``. One ``v1`` per configured secret lets the
merchant rotate: while both the old and the new secret are configured here,
a receiver knowing either one accepts the notification.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Sequence

from django.conf import settings

HEADER = "Sandbox-Signature"
SCHEME = "v1"
# How far ``t`` may be from the receiver's clock, in both directions: long enough
# for a slow delivery and modest clock skew, short enough that a captured request
# is useless soon after. (Stripe uses the same five minutes.)
TOLERANCE_S = 300


def configured_secrets() -> list[str]:
    """SANDBOX_WEBHOOK_SECRET as a list (comma-separated for rotation), read per call."""
    return [item.strip() for item in settings.SANDBOX_WEBHOOK_SECRET.split(",") if item.strip()]


def _digest(secret: str, timestamp: int, body: bytes) -> str:
    material = f"{timestamp}.".encode() + body
    return hmac.new(secret.encode(), material, hashlib.sha256).hexdigest()


def sign(*, body: bytes, secrets: Sequence[str], timestamp: int | None = None) -> str:
    """The header value for ``body``: one ``v1`` per secret, all over the same ``t``."""
    if not secrets:
        raise ValueError("at least one secret is needed to sign")
    t = int(time.time()) if timestamp is None else timestamp
    return ",".join([f"t={t}", *(f"{SCHEME}={_digest(secret, t, body)}" for secret in secrets)])


def verify(
    *,
    header: str | None,
    body: bytes,
    secrets: Sequence[str],
    now: float | None = None,
    tolerance_s: int = TOLERANCE_S,
) -> bool:
    """True when ``t`` is fresh and any ``v1`` matches ``body`` under any secret."""
    if not header:
        return False
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == SCHEME and value:
            signatures.append(value)
    if timestamp is None or not signatures:
        return False
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        return False
    expected = [_digest(secret, timestamp, body) for secret in secrets]
    # compare_digest, never ==: the time a comparison takes must not reveal how
    # many leading characters of a forged signature were right. Every pair is
    # compared (no early exit) for the same reason.
    matches = [hmac.compare_digest(given, want) for given in signatures for want in expected]
    return any(matches)
