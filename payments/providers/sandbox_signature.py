"""The sandbox's signature on its notifications, ``Sandbox-Signature``
(docs/design.md, "Callbacks").

``t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>``, with one
``v1`` per secret while secrets rotate. Checked over the raw bytes before
anything of the body is read.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Mapping

from payments.providers.base import NotificationSignatureInvalid

SIGNATURE_HEADER = "Sandbox-Signature"
# A signed notification older (or newer) than this is refused: a captured request
# cannot be replayed at us later. Five minutes absorbs clock skew and queueing.
SIGNATURE_TOLERANCE_S = 300
# The header's parts, matched whole: `t` is Unix seconds in 1-12 ASCII digits (int()
# and float() of anything longer, or of a Unicode digit like "²", would misbehave),
# `v1` is a lowercase hex SHA-256 (compare_digest refuses non-ASCII text).
_TIMESTAMP_PART = re.compile(r"t=([0-9]{1,12})")
_SIGNATURE_PART = re.compile(r"v1=([0-9a-f]{64})")
# The header as the schema documents it (spaces around parts are tolerated too).
SIGNATURE_HEADER_PATTERN = r"^t=[0-9]{1,12}(,v1=[0-9a-f]{64}){1,8}$"
# One v1 per secret while secrets rotate: a handful at most. More is someone making
# us compute HMAC comparisons for free.
MAX_SIGNATURES = 8


def sign(*, secret: str, timestamp: int, raw_body: bytes) -> str:
    message = f"{timestamp}.".encode() + raw_body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify_signature(*, headers: Mapping[str, str], raw_body: bytes, secrets: list[str]) -> None:
    """Raise NotificationSignatureInvalid unless one of ``secrets`` signed ``raw_body`` now."""
    timestamp, signatures = _parse_signature_header(headers.get(SIGNATURE_HEADER))
    if abs(time.time() - timestamp) > SIGNATURE_TOLERANCE_S:
        raise NotificationSignatureInvalid("signature timestamp outside the tolerance")
    expected = [sign(secret=s, timestamp=timestamp, raw_body=raw_body) for s in secrets]
    # Constant-time comparison of every pair: no early exit that leaks timing.
    matches = [hmac.compare_digest(e, given) for e in expected for given in signatures]
    if not any(matches):
        raise NotificationSignatureInvalid("no signature matches")


def _parse_signature_header(raw: str | None) -> tuple[int, list[str]]:
    """``t=<seconds>,v1=<hex>[,v1=<hex>...]``, every part matched whole, or refused."""
    if not raw:
        raise NotificationSignatureInvalid("missing signature header")
    timestamps: list[int] = []
    signatures: list[str] = []
    for part in raw.split(","):
        part = part.strip(" \t")
        if match := _TIMESTAMP_PART.fullmatch(part):
            timestamps.append(int(match.group(1)))
        elif match := _SIGNATURE_PART.fullmatch(part):
            signatures.append(match.group(1))
        else:
            raise NotificationSignatureInvalid("malformed signature header")
    if len(timestamps) != 1 or not 1 <= len(signatures) <= MAX_SIGNATURES:
        raise NotificationSignatureInvalid("malformed signature header")
    return timestamps[0], signatures
