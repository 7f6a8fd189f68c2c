"""The HTTP client for the sandbox provider (docs/design.md, "The sandbox provider").

Everything the shop knows about the sandbox is in this file and its helpers:
its URLs here, its JSON in ``sandbox_parsing``, its statement in
``sandbox_statement``, its signature header in ``sandbox_signature``. Every
answer is parsed strictly, and anything we do not understand (a timeout, a 5xx,
an unexpected status, garbage JSON) is ``ProviderOutcomeUnknown``: the money may
or may not have moved, and only asking the provider later (query by our
reference) can tell. An answer about another reference than the one asked about
is ``ProviderAnswerConflict``; a refused charge or refund (4xx) is ``ProviderRejected``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import date
from functools import partial
from typing import Any, TypeVar
from urllib.parse import quote

import requests
from django.conf import settings

from edge.errors import ApplicationError
from edge.strictjson import loads
from observability import context
from payments.providers.base import (
    ChargeResult,
    CustomerActionRequired,
    DisputeNotification,
    DisputeResult,
    Notification,
    NotificationMalformed,
    ProviderAnswerConflict,
    ProviderOutcomeUnknown,
    ProviderRejected,
    RefundNotification,
    RefundResult,
    StatementEntry,
    StatementMalformed,
    WalletStatement,
)
from payments.providers.http import keepalive_session
from payments.providers.observed import provider_call
from payments.providers.sandbox_parsing import (
    parse_charge,
    parse_dispute,
    parse_notification,
    parse_refund,
    parse_waiting,
    parse_wallet,
)
from payments.providers.sandbox_signature import SIGNATURE_HEADER, sign, verify_signature
from payments.providers.sandbox_statement import parse_statement, text_lines

# The signature's header and signer, where the sandbox's importers have found them.
__all__ = ["SIGNATURE_HEADER", "SandboxProvider", "sign"]


T = TypeVar("T")

# 4xx answers to a money-moving call that are not a plain refusal: 408 and 429
# say "not now", 409 that the same key is in flight, 422 that this key or
# reference already holds a charge or refund with other terms (money may have
# moved under it: ask, never guess). All are outcome-unknown.
MONEY_4XX_WITH_A_MEANING = frozenset({408, 409, 422, 429})
# The statement is read in pieces of this size: memory stays flat whatever its length.
STATEMENT_CHUNK_BYTES = 64 * 1024


class SandboxProvider:
    name = "sandbox"
    callback_route = "callback-sandbox"
    # TakesScriptedFaults: the demo's story and chaos panel script its next answers.
    faults_path = "/v1/faults"

    def __init__(
        self, *, base_url: str, api_key: str, timeout_s: float, webhook_secrets: list[str]
    ) -> None:
        self.base_url = base_url
        self.timeout = (timeout_s, timeout_s)  # (connect, read)
        self.webhook_secrets = webhook_secrets
        self.session = keepalive_session(pool_size=settings.RECONCILE_CONCURRENCY)
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
        # The request id goes along, so the provider's log lines carry it too.
        kwargs["headers"] = {**kwargs.get("headers", {}), **context.outbound_headers()}
        try:
            return self.session.request(
                method, f"{self.base_url}{path}", timeout=self.timeout, **kwargs
            )
        except requests.RequestException as error:
            # Includes a connect failure: most likely nothing was sent, but "most
            # likely" is a guess, and we do not guess about money.
            raise ProviderOutcomeUnknown(f"{method} {path}: {error.__class__.__name__}") from error

    @staticmethod
    def _read(response: requests.Response, parse: Callable[[Any], T]) -> T:
        try:
            return parse(response.json())
        except (ValueError, TypeError, AttributeError) as error:  # JSON errors are ValueErrors
            raise ProviderOutcomeUnknown(f"unreadable answer: {error}") from error

    @staticmethod
    def _refused(response: requests.Response, what: str) -> Exception:
        """What a non-200 answer to a money-moving call means (see base.py).

        Only a 4xx without a meaning of its own that carries the sandbox's
        problem+json ``code`` proves a refusal; anything else (a proxy's error
        page, a teapot) is not understood, hence unknown.
        """
        status = response.status_code
        if 400 <= status < 500 and status not in MONEY_4XX_WITH_A_MEANING:
            try:
                code = response.json().get("code")
            except (ValueError, AttributeError):
                code = None
            if isinstance(code, str) and code:
                return ProviderRejected(status, code)
        return ProviderOutcomeUnknown(f"{what} answered HTTP {status}")

    @staticmethod
    def _same(asked: str, answered: str, name: str) -> None:
        # A readable answer about another reference says nothing about ours.
        if answered != asked:
            raise ProviderAnswerConflict(f"asked about {name} {asked!r}, answered {answered!r}")

    def _charge_answer(self, response: requests.Response, *, out_trade_no: str) -> ChargeResult:
        waiting = self._read(response, partial(parse_waiting, base_url=self.base_url))
        if waiting is not None:
            named, action = waiting
            self._same(out_trade_no, named, "out_trade_no")
            raise CustomerActionRequired(out_trade_no=out_trade_no, action=action)
        result = self._read(response, parse_charge)
        self._same(out_trade_no, result.out_trade_no, "out_trade_no")
        return result

    def _refund_answer(self, response: requests.Response, *, out_refund_no: str) -> RefundResult:
        result = self._read(response, parse_refund)
        self._same(out_refund_no, result.out_refund_no, "out_refund_no")
        return result

    @provider_call("charge")
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
            raise self._refused(response, "charge")
        return self._charge_answer(response, out_trade_no=out_trade_no)

    @provider_call("query")
    def query(self, *, out_trade_no: str, trade_no: str | None = None) -> ChargeResult | None:
        # One charge per out_trade_no at the sandbox (it dedupes on it), so the
        # reference finds it whatever the shop recorded; ``trade_no`` is checked by
        # the caller against the answer. A charge naming no reference it cannot hold.
        if not out_trade_no:
            return None
        response = self._call("GET", f"/v1/charges/{out_trade_no}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise ProviderOutcomeUnknown(f"query answered HTTP {response.status_code}")
        return self._charge_answer(response, out_trade_no=out_trade_no)

    @provider_call("close")
    def close(self, *, out_trade_no: str) -> ChargeResult:
        response = self._call("POST", f"/v1/charges/{out_trade_no}/close")
        if response.status_code == 409:
            # Too late to fence: it succeeded. The problem body nests the charge.
            result = self._read(response, lambda problem: parse_charge(problem.get("charge")))
            self._same(out_trade_no, result.out_trade_no, "out_trade_no")
            return result
        if response.status_code != 200:
            raise ProviderOutcomeUnknown(f"close answered HTTP {response.status_code}")
        return self._charge_answer(response, out_trade_no=out_trade_no)

    @provider_call("refund")
    def refund(
        self,
        *,
        out_refund_no: str,
        out_trade_no: str,
        amount: int,
        notify_url: str,
        idempotency_key: str,
        trade_no: str | None = None,
    ) -> RefundResult:
        # The sandbox refunds by our reference (one charge per out_trade_no there).
        response = self._call(
            "POST",
            "/v1/refunds",
            headers={"Idempotency-Key": idempotency_key},
            json={
                "out_refund_no": out_refund_no,
                "out_trade_no": out_trade_no,
                "amount": amount,
                "notify_url": notify_url,
            },
        )
        if response.status_code != 200:
            raise self._refused(response, "refund")
        result = self._refund_answer(response, out_refund_no=out_refund_no)
        self._same(out_trade_no, result.out_trade_no, "out_trade_no")
        return result

    @provider_call("query_refund")
    def query_refund(
        self, *, out_refund_no: str, trade_no: str | None = None
    ) -> RefundResult | None:
        response = self._call("GET", f"/v1/refunds/{quote(out_refund_no, safe='')}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise ProviderOutcomeUnknown(f"refund query answered HTTP {response.status_code}")
        return self._refund_answer(response, out_refund_no=out_refund_no)

    @provider_call("query_dispute")
    def query_dispute(self, *, dispute_id: str) -> DisputeResult | None:
        response = self._call("GET", f"/v1/disputes/{quote(dispute_id, safe='')}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise ProviderOutcomeUnknown(f"dispute query answered HTTP {response.status_code}")
        result = self._read(response, parse_dispute)
        self._same(dispute_id, result.dispute_id, "dispute_id")
        return result

    @provider_call("wallet")
    def wallet(self, *, payer: str) -> WalletStatement | None:
        response = self._call("GET", f"/v1/wallets/{quote(payer, safe='')}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise ProviderOutcomeUnknown(f"wallet answered HTTP {response.status_code}")
        return self._read(response, parse_wallet)

    @provider_call("statement")
    def statement(self, *, day: date) -> Iterator[StatementEntry]:
        # Streamed: the body is read as it arrives and parsed line by line, so a day
        # of millions of lines never sits in memory. The read timeout applies
        # between chunks, not to the whole download.
        with self._call("GET", f"/v1/statements/{day.isoformat()}", stream=True) as response:
            if response.status_code != 200:
                raise ProviderOutcomeUnknown(f"statement answered HTTP {response.status_code}")
            try:
                yield from parse_statement(
                    text_lines(response.iter_content(chunk_size=STATEMENT_CHUNK_BYTES)), day=day
                )
            except UnicodeDecodeError as error:
                raise StatementMalformed(f"not UTF-8 text: {error}") from error
            except requests.RequestException as error:
                # Cut off half-way: what we read is fine, but we do not have the day.
                raise ProviderOutcomeUnknown(f"statement download broke off: {error}") from error

    # --- notifications -------------------------------------------------------------

    def verify_notification(
        self, *, headers: Mapping[str, str], raw_body: bytes
    ) -> Notification | RefundNotification | DisputeNotification:
        """Check ``Sandbox-Signature`` over the raw bytes first; only then parse them."""
        verify_signature(headers=headers, raw_body=raw_body, secrets=self.webhook_secrets)
        try:
            # The same strict reader as the API's bodies: UTF-8 only, bounded nesting,
            # finite numbers, no lone surrogates.
            data = loads(raw_body)
        except ApplicationError as error:
            raise NotificationMalformed(f"{error.code}: {error.detail}") from error
        try:
            return parse_notification(data)
        except (ValueError, TypeError, AttributeError) as error:
            raise NotificationMalformed(f"malformed notification: {error}") from error
