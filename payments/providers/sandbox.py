"""The HTTP client for the sandbox provider (DESIGN.md section 5).

Everything the shop knows about the sandbox is in this file: its URLs, its
JSON, its signature header. Every answer is parsed strictly, and anything we
do not understand (a timeout, a 5xx, an unexpected status, garbage JSON) is
``ProviderOutcomeUnknown``: the charge may or may not have happened, and only
asking the provider later (query by ``out_trade_no``) can tell.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote

import requests
from django.conf import settings

from payments.providers.base import (
    ChargeResult,
    ChargeStatus,
    Notification,
    NotificationMalformed,
    NotificationSignatureInvalid,
    ProviderOutcomeUnknown,
    WalletStatement,
)

T = TypeVar("T")

SIGNATURE_HEADER = "Sandbox-Signature"
# A signed notification older (or newer) than this is refused: a captured request
# cannot be replayed at us later. Five minutes absorbs clock skew and queueing.
SIGNATURE_TOLERANCE_S = 300


def _text(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def _amount(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name)
    # bool is an int in Python; a provider saying `true` is not saying 1 fen.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer")
    return value


def _optional(
    parse: Callable[[Mapping[str, Any], str], T], data: Mapping[str, Any], name: str
) -> T | None:
    return None if data.get(name) is None else parse(data, name)


def _timestamp(data: Mapping[str, Any], name: str) -> datetime:
    return datetime.fromisoformat(_text(data, name))


def parse_charge(data: Any) -> ChargeResult:
    """A charge JSON object -> ChargeResult; ValueError on anything unexpected."""
    if not isinstance(data, dict):
        raise ValueError("charge must be a JSON object")
    return ChargeResult(
        out_trade_no=_text(data, "out_trade_no"),
        status=ChargeStatus(_text(data, "status")),
        trade_no=_optional(_text, data, "trade_no"),
        amount=_optional(_amount, data, "amount"),
        currency=_optional(_text, data, "currency"),
        paid_at=_optional(_timestamp, data, "paid_at"),
        decline_reason=_optional(_text, data, "decline_reason"),
    )


def sign(*, secret: str, timestamp: int, raw_body: bytes) -> str:
    message = f"{timestamp}.".encode() + raw_body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


class SandboxProvider:
    def __init__(
        self, *, base_url: str, api_key: str, timeout_s: float, webhook_secrets: list[str]
    ) -> None:
        self.base_url = base_url
        self.timeout = (timeout_s, timeout_s)  # (connect, read)
        self.webhook_secrets = webhook_secrets
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {api_key}"

    @classmethod
    def from_settings(cls) -> SandboxProvider:
        return cls(
            base_url=settings.PROVIDER_BASE_URL,
            api_key=settings.PROVIDER_API_KEY,
            timeout_s=settings.PROVIDER_TIMEOUT_S,
            webhook_secrets=[
                s.strip() for s in settings.SANDBOX_WEBHOOK_SECRET.split(",") if s.strip()
            ],
        )

    # --- calls ---------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        try:
            return self.session.request(
                method, f"{self.base_url}{path}", timeout=self.timeout, **kwargs
            )
        except requests.RequestException as error:
            # Includes a connect failure: most likely nothing was sent, but "most
            # likely" is a guess, and we do not guess about money.
            raise ProviderOutcomeUnknown(f"{method} {path}: {error.__class__.__name__}") from error

    @staticmethod
    def _charge_from(response: requests.Response) -> ChargeResult:
        try:
            return parse_charge(response.json())
        except ValueError as error:  # JSON decode errors are ValueErrors too
            raise ProviderOutcomeUnknown(f"unreadable answer: {error}") from error

    def charge(
        self,
        *,
        out_trade_no: str,
        amount: int,
        currency: str,
        payer: str,
        notify_url: str,
        idempotency_key: str,
    ) -> ChargeResult:
        response = self._call(
            "POST",
            "/v1/charges",
            headers={"Idempotency-Key": idempotency_key},
            json={
                "out_trade_no": out_trade_no,
                "amount": amount,
                "currency": currency,
                "payer": payer,
                "notify_url": notify_url,
            },
        )
        if response.status_code != 200:
            raise ProviderOutcomeUnknown(f"charge answered HTTP {response.status_code}")
        result = self._charge_from(response)
        if result.out_trade_no != out_trade_no:
            raise ProviderOutcomeUnknown("charge answered for another out_trade_no")
        return result

    def query(self, *, out_trade_no: str) -> ChargeResult | None:
        response = self._call("GET", f"/v1/charges/{out_trade_no}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise ProviderOutcomeUnknown(f"query answered HTTP {response.status_code}")
        return self._charge_from(response)

    def close(self, *, out_trade_no: str) -> ChargeResult:
        response = self._call("POST", f"/v1/charges/{out_trade_no}/close")
        if response.status_code == 409:
            # Too late to fence: it succeeded. The problem body nests the charge.
            try:
                return parse_charge(response.json().get("charge"))
            except (ValueError, AttributeError) as error:
                raise ProviderOutcomeUnknown(f"unreadable answer: {error}") from error
        if response.status_code != 200:
            raise ProviderOutcomeUnknown(f"close answered HTTP {response.status_code}")
        return self._charge_from(response)

    def wallet(self, *, payer: str) -> WalletStatement | None:
        response = self._call("GET", f"/v1/wallets/{quote(payer, safe='')}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise ProviderOutcomeUnknown(f"wallet answered HTTP {response.status_code}")
        try:
            data = response.json()
            charges = data.get("charges")
            if not isinstance(charges, list):
                raise ValueError("charges must be a list")
            return WalletStatement(
                payer=_text(data, "payer"),
                balance=_amount(data, "balance"),
                charged_total=_amount(data, "charged_total"),
                charges=tuple(parse_charge(charge) for charge in charges),
            )
        except (ValueError, AttributeError) as error:
            raise ProviderOutcomeUnknown(f"unreadable answer: {error}") from error

    # --- notifications -------------------------------------------------------------

    def verify_notification(self, *, headers: Mapping[str, str], raw_body: bytes) -> Notification:
        """Check ``Sandbox-Signature`` over the raw bytes first; only then parse them."""
        timestamp, signatures = self._parse_signature_header(headers.get(SIGNATURE_HEADER))
        if abs(time.time() - timestamp) > SIGNATURE_TOLERANCE_S:
            raise NotificationSignatureInvalid("signature timestamp outside the tolerance")
        expected = [
            sign(secret=s, timestamp=timestamp, raw_body=raw_body) for s in self.webhook_secrets
        ]
        # Constant-time comparison of every pair: no early exit that leaks timing.
        matches = [hmac.compare_digest(e, given) for e in expected for given in signatures]
        if not any(matches):
            raise NotificationSignatureInvalid("no signature matches")
        try:
            data = json.loads(raw_body)
            return Notification(
                notify_id=_text(data, "notify_id"),
                trade_no=_text(data, "trade_no"),
                out_trade_no=_text(data, "out_trade_no"),
                trade_status=ChargeStatus(_text(data, "trade_status")),
                amount=_amount(data, "amount"),
                currency=_text(data, "currency"),
                paid_at=_optional(_timestamp, data, "paid_at"),
            )
        except (ValueError, TypeError, AttributeError) as error:
            raise NotificationMalformed(f"malformed notification: {error}") from error

    @staticmethod
    def _parse_signature_header(raw: str | None) -> tuple[int, list[str]]:
        if not raw:
            raise NotificationSignatureInvalid("missing signature header")
        timestamp: int | None = None
        signatures: list[str] = []
        for part in raw.split(","):
            name, _, value = part.strip().partition("=")
            if name == "t" and value.isdigit():
                timestamp = int(value)
            elif name == "v1" and value:
                signatures.append(value)
        if timestamp is None or not signatures:
            raise NotificationSignatureInvalid("malformed signature header")
        return timestamp, signatures
