"""The sandbox's JSON, read strictly into the provider values of ``base``.

Every function raises ValueError (or TypeError/AttributeError on a wrong shape)
on anything unexpected; the client turns that into ProviderOutcomeUnknown for
answers and NotificationMalformed for notifications.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urljoin

from edge.bounds import BIGINT_MAX, text_problem
from payments.providers.base import (
    ChargeResult,
    ChargeStatus,
    DisputeNotification,
    DisputeResult,
    DisputeStatus,
    Notification,
    RefundNotification,
    RefundResult,
    RefundStatus,
    WalletStatement,
)

T = TypeVar("T")

# The ``event`` of a refund (dispute) notification; a body without ``event`` is a charge's.
REFUND_EVENT = "refund"
DISPUTE_EVENT = "dispute"
# The longest text field the shop keeps from the provider (ids, references, reasons).
MAX_TEXT = 64
MAX_PAYER = 150  # the shop sends its usernames as payers


def _object(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a JSON object")
    return data


def _text(data: Mapping[str, Any], name: str, max_length: int = MAX_TEXT) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    # Longer than any column of ours, a NUL, a lone surrogate: refused before any SQL.
    if problem := text_problem(value, max_length=max_length):
        raise ValueError(f"{name} {problem}")
    return value


def _currency(data: Mapping[str, Any], name: str) -> str:
    value = _text(data, name)
    if not re.fullmatch(r"[A-Z]{3}", value):
        raise ValueError(f"{name} must be an ISO 4217 code (three capital letters)")
    return value


def _amount(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name)
    # bool is an int in Python; a provider saying `true` is not saying 1 fen.
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= BIGINT_MAX:
        raise ValueError(f"{name} must be an integer from 0 to {BIGINT_MAX}")
    return value


def _optional(
    parse: Callable[[Mapping[str, Any], str], T], data: Mapping[str, Any], name: str
) -> T | None:
    return None if data.get(name) is None else parse(data, name)


def _timestamp(data: Mapping[str, Any], name: str) -> datetime:
    value = datetime.fromisoformat(_text(data, name))
    if value.tzinfo is None:
        raise ValueError(f"{name} must carry a UTC offset")
    try:
        return value.astimezone(UTC)
    except OverflowError as error:  # 9999-12-31T23:59-23:59 is past year 9999 in UTC
        raise ValueError(f"{name} is out of range") from error


def _list(data: Mapping[str, Any], name: str) -> list[Any]:
    value = data.get(name)
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list")
    return value


def parse_charge(data: Any) -> ChargeResult:
    """A charge JSON object -> ChargeResult."""
    data = _object(data, "charge")
    return ChargeResult(
        out_trade_no=_text(data, "out_trade_no"),
        status=ChargeStatus(_text(data, "status")),
        trade_no=_optional(_text, data, "trade_no"),
        amount=_optional(_amount, data, "amount"),
        currency=_optional(_currency, data, "currency"),
        paid_at=_optional(_timestamp, data, "paid_at"),
        decline_reason=_optional(_text, data, "decline_reason"),
    )


# A charge that waits for the customer (the sandbox's requires_action fault).
ACTION_REQUIRED = "ACTION_REQUIRED"


def parse_waiting(data: Any, *, base_url: str) -> tuple[str, dict[str, Any]] | None:
    """A charge that waits for the customer: its ``out_trade_no``, and what the customer
    needs to finish it (``client_secret``, ``next_action`` with its URL absolute). None
    for a charge that does not wait."""
    data = _object(data, "charge")
    if data.get("status") != ACTION_REQUIRED:
        return None
    next_action = _object(data.get("next_action"), "next_action")
    return _text(data, "out_trade_no"), {
        "client_secret": _text(data, "client_secret"),
        "next_action": {
            "type": _text(next_action, "type"),
            "url": urljoin(base_url, _text(next_action, "url", max_length=2000)),
        },
    }


def parse_refund(data: Any) -> RefundResult:
    """A refund JSON object -> RefundResult."""
    data = _object(data, "refund")
    return RefundResult(
        out_refund_no=_text(data, "out_refund_no"),
        out_trade_no=_text(data, "out_trade_no"),
        status=RefundStatus(_text(data, "status")),
        refund_id=_optional(_text, data, "refund_id"),
        amount=_optional(_amount, data, "amount"),
        currency=_optional(_currency, data, "currency"),
        refunded_at=_optional(_timestamp, data, "refunded_at"),
        decline_reason=_optional(_text, data, "decline_reason"),
    )


def parse_dispute(data: Any) -> DisputeResult:
    """A dispute JSON object -> DisputeResult."""
    data = _object(data, "dispute")
    return DisputeResult(
        dispute_id=_text(data, "dispute_id"),
        trade_no=_text(data, "trade_no"),
        out_trade_no=_text(data, "out_trade_no"),
        status=DisputeStatus(_text(data, "status")),
        amount=_amount(data, "amount"),
        currency=_currency(data, "currency"),
        withdrawn=_amount(data, "withdrawn"),
        reinstated=_amount(data, "reinstated"),
        opened_at=_optional(_timestamp, data, "opened_at"),
        reason=_optional(_text, data, "reason") or "",
    )


def parse_wallet(data: Any) -> WalletStatement:
    """A wallet JSON object -> WalletStatement."""
    data = _object(data, "wallet")
    return WalletStatement(
        payer=_text(data, "payer", max_length=MAX_PAYER),
        balance=_amount(data, "balance"),
        charged_total=_amount(data, "charged_total"),
        # A charge still waiting for its customer moved no money: not in the account.
        charges=tuple(
            parse_charge(charge)
            for charge in _list(data, "charges")
            if not (isinstance(charge, dict) and charge.get("status") == ACTION_REQUIRED)
        ),
        refunded_total=_amount(data, "refunded_total"),
        refunds=tuple(parse_refund(refund) for refund in _list(data, "refunds")),
        # Absent from a sandbox that keeps no disputes: none.
        disputed_total=_optional(_amount, data, "disputed_total") or 0,
        disputes=tuple(
            parse_dispute(dispute)
            for dispute in (_list(data, "disputes") if "disputes" in data else [])
        ),
    )


def parse_notification(data: Any) -> Notification | RefundNotification | DisputeNotification:
    """A notification body -> Notification (no ``event``), RefundNotification or
    DisputeNotification."""
    data = _object(data, "notification")
    event = data.get("event")
    if event is None:
        return Notification(
            notify_id=_text(data, "notify_id"),
            trade_no=_text(data, "trade_no"),
            out_trade_no=_text(data, "out_trade_no"),
            trade_status=ChargeStatus(_text(data, "trade_status")),
            amount=_amount(data, "amount"),
            currency=_currency(data, "currency"),
            paid_at=_optional(_timestamp, data, "paid_at"),
        )
    if event == DISPUTE_EVENT:
        return DisputeNotification(notify_id=_text(data, "notify_id"), dispute=parse_dispute(data))
    if event != REFUND_EVENT:
        # An event we do not know is not a charge notification in disguise.
        raise ValueError(f"unknown event {event!r}")
    return RefundNotification(
        notify_id=_text(data, "notify_id"),
        refund_id=_text(data, "refund_id"),
        out_refund_no=_text(data, "out_refund_no"),
        out_trade_no=_text(data, "out_trade_no"),
        status=RefundStatus(_text(data, "status")),
        amount=_amount(data, "amount"),
        currency=_optional(_currency, data, "currency"),
        refunded_at=_optional(_timestamp, data, "refunded_at"),
    )
