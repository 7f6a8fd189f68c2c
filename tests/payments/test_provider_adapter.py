"""The sandbox adapter against a provider that lies: a real HTTP server on loopback
that answers whatever a test scripts (never a mock of requests).

Every answer must name what was asked about; an answer about another reference
is a conflict, never applied. A refused refund (4xx) is a rejection; a timeout,
a 5xx or garbage is an unknown outcome.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from payments.providers import (
    ChargeResult,
    ChargeStatus,
    Notification,
    NotificationMalformed,
    ProviderAnswerConflict,
    ProviderOutcomeUnknown,
    ProviderRejected,
    RefundNotification,
    RefundResult,
    RefundStatus,
)
from payments.providers.sandbox import SIGNATURE_HEADER, SandboxProvider, sign

SECRET = "whsec-adapter-test"
TIMEOUT_S = 0.5


@dataclass
class Script:
    """What the lying provider answers, in order: (status, body); body None = empty."""

    answers: list[tuple[int, Any]] = field(default_factory=list)
    delay_s: float = 0.0
    requests: list[tuple[str, str, bytes]] = field(default_factory=list)


@pytest.fixture
def liar() -> Iterator[tuple[Script, SandboxProvider]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            script.requests.append((self.command, self.path, self.rfile.read(length)))
            status, body = script.answers.pop(0)
            if script.delay_s:
                time.sleep(script.delay_s)  # the provider is slow on purpose
            if body is None or isinstance(body, bytes):
                raw = body or b""
            else:
                raw = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped waiting (the timeout test): nobody to answer

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    provider = SandboxProvider(
        base_url=f"http://127.0.0.1:{server.server_address[1]}/sandbox",
        api_key="merchant-key",
        timeout_s=TIMEOUT_S,
        webhook_secrets=[SECRET],
    )
    try:
        yield script, provider
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def charge_json(out_trade_no: str = "P-asked", status: str = "SUCCESS") -> dict[str, Any]:
    return {
        "trade_no": "T0001",
        "out_trade_no": out_trade_no,
        "status": status,
        "amount": 1999,
        "currency": "CNY",
        "payer": "alice",
        "paid_at": "2026-12-01T07:00:00Z" if status == "SUCCESS" else None,
        "decline_reason": None,
    }


def refund_json(out_refund_no: str = "R-asked", out_trade_no: str = "P-asked") -> dict[str, Any]:
    return {
        "refund_id": "R0001",
        "out_refund_no": out_refund_no,
        "out_trade_no": out_trade_no,
        "status": "SUCCESS",
        "amount": 500,
        "currency": "CNY",
        "refunded_at": "2026-12-01T07:00:00Z",
        "decline_reason": None,
    }


def do_refund(provider: SandboxProvider) -> RefundResult:
    return provider.refund(
        out_refund_no="R-asked",
        out_trade_no="P-asked",
        amount=500,
        notify_url="http://shop/callbacks/",
        idempotency_key="rk",
    )


def do_charge(provider: SandboxProvider) -> ChargeResult:
    return provider.charge(
        out_trade_no="P-asked",
        amount=1999,
        currency="CNY",
        payer="alice",
        notify_url="http://shop/callbacks/",
        idempotency_key="k",
    )


# --- Answers about another reference ----------------------------------------------


@pytest.mark.parametrize(
    ("call", "answer"),
    [
        (do_charge, (200, charge_json("P-other"))),
        (lambda p: p.query(out_trade_no="P-asked"), (200, charge_json("P-other"))),
        (lambda p: p.close(out_trade_no="P-asked"), (200, charge_json("P-other", "CLOSED"))),
        (
            lambda p: p.close(out_trade_no="P-asked"),
            (409, {"code": "charge-already-succeeded", "charge": charge_json("P-other")}),
        ),
        (do_refund, (200, refund_json(out_refund_no="R-other"))),
        (do_refund, (200, refund_json(out_trade_no="P-other"))),
        (lambda p: p.query_refund(out_refund_no="R-asked"), (200, refund_json("R-other"))),
    ],
    ids=[
        "charge",
        "query",
        "close",
        "close-409",
        "refund",
        "refund-of-another-charge",
        "query_refund",
    ],
)
def test_an_answer_about_another_reference_is_a_conflict(liar, call, answer):
    script, provider = liar
    script.answers = [answer]

    with pytest.raises(ProviderAnswerConflict) as raised:
        call(provider)

    assert isinstance(raised.value, ProviderOutcomeUnknown)  # never applied


def test_answers_about_the_asked_reference_are_read(liar):
    script, provider = liar
    script.answers = [
        (200, charge_json()),
        (409, {"code": "charge-already-succeeded", "charge": charge_json()}),
        (200, refund_json()),
        (200, refund_json()),
    ]

    queried = provider.query(out_trade_no="P-asked")
    closed = provider.close(out_trade_no="P-asked")
    refunded = do_refund(provider)
    truth = provider.query_refund(out_refund_no="R-asked")

    assert queried is not None
    assert (queried.status, closed.status) == (ChargeStatus.SUCCESS, ChargeStatus.SUCCESS)
    assert refunded == truth
    assert refunded == RefundResult(
        out_refund_no="R-asked",
        out_trade_no="P-asked",
        status=RefundStatus.SUCCESS,
        refund_id="R0001",
        amount=500,
        currency="CNY",
        refunded_at=refunded.refunded_at,
    )
    assert refunded.refunded_at is not None
    method, path, body = script.requests[2]
    assert (method, path) == ("POST", "/sandbox/v1/refunds")
    assert json.loads(body) == {
        "out_refund_no": "R-asked",
        "out_trade_no": "P-asked",
        "amount": 500,
        "notify_url": "http://shop/callbacks/",
    }
    assert script.requests[3][:2] == ("GET", "/sandbox/v1/refunds/R-asked")


# --- Refused, unknown, or nothing there ------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (404, {"code": "charge-not-found"}, "charge-not-found"),
        (400, {"code": "validation-error"}, "validation-error"),
        (401, {"code": "merchant-unauthorized"}, "merchant-unauthorized"),
    ],
)
def test_a_refused_refund_is_a_rejection_with_its_code(liar, status, body, code):
    script, provider = liar
    script.answers = [(status, body)]

    with pytest.raises(ProviderRejected) as raised:
        do_refund(provider)

    assert (raised.value.status, raised.value.code) == (status, code)
    assert not isinstance(raised.value, ProviderOutcomeUnknown)


@pytest.mark.parametrize(
    "answer",
    [
        (500, {"code": "provider-error"}),
        (503, None),
        (409, {"code": "idempotency-key-in-use"}),
        (422, {"code": "out-refund-no-mismatch"}),  # a refund exists under it: ask
        (429, None),
        (400, b"<html>a proxy's bad request</html>"),  # not the provider speaking
        (408, None),
        (302, None),
        (200, b"not json"),
        (200, {"refund_id": "R1"}),
        (200, {**refund_json(), "amount": True}),
        (200, {**refund_json(), "status": "PENDING"}),
    ],
    ids=str,
)
def test_a_refund_answer_we_cannot_trust_is_an_unknown_outcome(liar, answer):
    script, provider = liar
    script.answers = [answer]

    with pytest.raises(ProviderOutcomeUnknown) as raised:
        do_refund(provider)

    assert not isinstance(raised.value, ProviderAnswerConflict)


def test_a_refund_that_answers_too_late_is_an_unknown_outcome(liar):
    script, provider = liar
    script.answers = [(200, refund_json())]
    script.delay_s = TIMEOUT_S * 3

    with pytest.raises(ProviderOutcomeUnknown):
        do_refund(provider)


def test_query_refund_of_nothing_is_none_and_a_5xx_is_unknown(liar):
    script, provider = liar
    script.answers = [(404, {"code": "refund-not-found"}), (502, None)]

    assert provider.query_refund(out_refund_no="R-asked") is None
    with pytest.raises(ProviderOutcomeUnknown):
        provider.query_refund(out_refund_no="R-asked")


def test_query_refund_quotes_the_reference_into_the_path(liar):
    script, provider = liar
    script.answers = [(404, None)]

    provider.query_refund(out_refund_no="R 1?x#y")

    assert script.requests[0][1] == "/sandbox/v1/refunds/R%201%3Fx%23y"


def test_the_wallet_statement_carries_refunds(liar):
    script, provider = liar
    wallet = {
        "payer": "alice",
        "balance": 1000,
        "charged_total": 1999,
        "refunded_total": 500,
        "charges": [charge_json()],
        "refunds": [refund_json()],
    }
    script.answers = [(200, wallet), (200, {**wallet, "refunded_total": None})]

    statement = provider.wallet(payer="alice")

    assert statement is not None
    assert (statement.charged_total, statement.refunded_total) == (1999, 500)
    assert [refund.out_refund_no for refund in statement.refunds] == ["R-asked"]
    with pytest.raises(ProviderOutcomeUnknown):
        provider.wallet(payer="alice")


# --- Notifications: a body without ``event`` is a charge's -------------------------------


def signed(payload: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    raw = json.dumps(payload).encode()
    t = int(time.time())
    return {SIGNATURE_HEADER: f"t={t},v1={sign(secret=SECRET, timestamp=t, raw_body=raw)}"}, raw


def test_notifications_are_told_apart_by_event(liar):
    _, provider = liar
    charge_notice = {
        "notify_id": "N1",
        "trade_no": "T1",
        "out_trade_no": "P-1",
        "trade_status": "SUCCESS",
        "amount": 1999,
        "currency": "CNY",
        "paid_at": "2026-12-01T07:00:00Z",
    }
    refund_notice = {"event": "refund", "notify_id": "N2", **refund_json()}
    del refund_notice["decline_reason"]

    headers, raw = signed(charge_notice)
    charge_read = provider.verify_notification(headers=headers, raw_body=raw)
    headers, raw = signed(refund_notice)
    refund_read = provider.verify_notification(headers=headers, raw_body=raw)

    assert isinstance(charge_read, Notification)
    assert charge_read.trade_status == ChargeStatus.SUCCESS
    assert isinstance(refund_read, RefundNotification)
    assert (refund_read.notify_id, refund_read.out_refund_no, refund_read.out_trade_no) == (
        "N2",
        "R-asked",
        "P-asked",
    )
    assert (refund_read.status, refund_read.amount, refund_read.currency) == (
        RefundStatus.SUCCESS,
        500,
        "CNY",
    )
    assert refund_read.refunded_at is not None


@pytest.mark.parametrize(
    "payload",
    [
        {"event": "dispute", "notify_id": "N3"},
        {"event": "refund", "notify_id": "N4", "refund_id": "R1"},
        {**refund_json(), "event": "refund", "notify_id": "N5", "status": "MAYBE"},
    ],
    ids=["unknown-event", "refund-missing-fields", "refund-unknown-status"],
)
def test_an_unreadable_notification_is_malformed(liar, payload):
    _, provider = liar
    headers, raw = signed(payload)

    with pytest.raises(NotificationMalformed):
        provider.verify_notification(headers=headers, raw_body=raw)
