"""The sandbox provider's HTTP API (/sandbox/v1/...): validate, call one service, serialize.

Merchant endpoints authenticate with the merchant key only, never with the
shop's tokens or sessions, and are not throttled by the shop's limits. The
faults endpoint is the demo's chaos control: staff only, with the shop's auth.
The shop's OpenAPI document leaves all of it out: it is another company's API.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import SplitResult, urlsplit

from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import AllowAny, IsAdminUser
from rest_framework.renderers import JSONRenderer, TemplateHTMLRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from demo.sandbox.auth import IsMerchant, MerchantKeyAuthentication
from demo.sandbox.errors import IdempotencyKeyInvalid, IdempotencyKeyMissing
from demo.sandbox.models import Fault
from demo.sandbox.selectors import (
    charge_get,
    dispute_get,
    fault_list_active,
    refund_get,
    wallet_charges,
    wallet_disputes,
    wallet_get,
    wallet_refunds,
)
from demo.sandbox.serializers import (
    ChargeOutputSerializer,
    DisputeOutputSerializer,
    RefundOutputSerializer,
    charge_json,
    dispute_json,
    refund_json,
)
from demo.sandbox.services import (
    Answer,
    charge_close,
    charge_create,
    charge_customer_act,
    fault_clear,
    fault_set,
    refund_create,
)
from demo.sandbox.statements import statement_csv, statement_day
from edge.auth import TokenAuthentication
from edge.fields import StrictIntegerField
from observability import context

# The fault modes that apply to one target only (the rest apply to either).
ONE_TARGET_MODES = {
    Fault.Mode.REQUIRES_ACTION: Fault.Target.CHARGE,
    Fault.Mode.REFUND_REVERSAL: Fault.Target.REFUND,
    Fault.Mode.DISPUTE_LOST: Fault.Target.CHARGE,
}
IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
_KEY_PATTERN = re.compile(r"[A-Za-z0-9\-_.:~]{1,255}")
# Far above any demo basket, far below BIGINT: an absurd amount is a client bug.
MAX_AMOUNT = 10**12


def parse_idempotency_key(raw: str | None) -> str:
    if raw is None:
        raise IdempotencyKeyMissing()
    if not _KEY_PATTERN.fullmatch(raw):
        raise IdempotencyKeyInvalid()
    return raw


def validate_http_url(value: str) -> None:
    # Not DRF's URLField: Django's validator wants a dotted domain, and a merchant
    # on a private network (http://shop:8000, docker-compose) is a fine notify_url.
    try:
        parts = urlsplit(value)
        valid = parts.scheme in {"http", "https"} and bool(parts.hostname)
    except ValueError:  # e.g. an unbalanced IPv6 bracket
        valid = False
    if not valid or any(char.isspace() for char in value):
        raise serializers.ValidationError("Enter an absolute http:// or https:// URL.")


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(parts: SplitResult) -> tuple[str, str | None, int | None]:
    return parts.scheme, parts.hostname, parts.port or _DEFAULT_PORTS.get(parts.scheme)


def _under(url: str, prefix: str) -> bool:
    # Compared parsed, never as strings: "http://shop:8000" is a string prefix of
    # "http://shop:80001/" and of "http://shop:8000@elsewhere/".
    try:
        given, allowed = urlsplit(url), urlsplit(prefix)
        same_origin = _origin(given) == _origin(allowed)
    except ValueError:  # a port that is not a number
        return False
    base = allowed.path.rstrip("/")
    in_path = given.path == base or given.path.startswith(base + "/")
    return same_origin and in_path and given.username is None and given.password is None


def validate_notify_url(value: str) -> None:
    """An http(s) URL under one of ``SANDBOX_NOTIFY_URLS`` (default: ``SHOP_BASE_URL``).

    The sandbox's worker POSTs to this URL: open to any URL, a merchant request could
    make it call anything the deployment's network reaches (a blind SSRF). Every
    endpoint taking a ``notify_url`` uses this validator.
    """
    validate_http_url(value)
    allowed = settings.SANDBOX_NOTIFY_URLS or [settings.SHOP_BASE_URL]
    if not any(_under(value, prefix) for prefix in allowed):
        raise serializers.ValidationError(
            "This notify_url is not on the provider's allow-list (SANDBOX_NOTIFY_URLS)."
        )


@extend_schema(exclude=True)
class IndexApi(APIView):
    """GET /sandbox/: what this provider offers.

    JSON for a program (the first renderer: ``Accept: */*``, ``application/json``),
    an HTML page for a browser, which asks for ``text/html`` first.
    """

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    throttle_classes: list[type] = []
    renderer_classes = [JSONRenderer, TemplateHTMLRenderer]
    template_name = "sandbox/index.html"

    def get(self, request: Request) -> Response:
        return Response(
            {
                "provider": "OnceShop's sandbox: a stand-in payment provider (docs/design.md)",
                "merchant_auth": "Authorization: Bearer <merchant key> (SANDBOX_API_KEYS)",
                "endpoints": SANDBOX_ENDPOINTS,
                "fault_modes": FAULT_MODES,
                "admin": "/admin/ (its tables, read-only)",
            }
        )


# What the index lists, in the order a merchant meets them.
SANDBOX_ENDPOINTS = [
    "POST /sandbox/v1/charges (Idempotency-Key)",
    "GET /sandbox/v1/charges/{out_trade_no}",
    "POST /sandbox/v1/charges/{out_trade_no}/close",
    "POST /sandbox/v1/charges/{out_trade_no}/action (the customer: client_secret, "
    "result complete|abandon)",
    "POST /sandbox/v1/refunds (Idempotency-Key)",
    "GET /sandbox/v1/refunds/{out_refund_no}",
    "GET /sandbox/v1/disputes/{dispute_id}",
    "GET /sandbox/v1/wallets/{payer}",
    "GET /sandbox/v1/statements/{date} (the UTC day's statement as CSV, date YYYY-MM-DD)",
    "GET, POST, DELETE /sandbox/v1/faults (staff of the shop)",
]


# What each fault mode does (POST /sandbox/v1/faults, staff): docs/design.md's sandbox.
FAULT_MODES = {
    Fault.Mode.DECLINE: "the charge or refund is declined",
    Fault.Mode.ERROR_BEFORE_COMMIT: "500, nothing charged or refunded",
    Fault.Mode.ERROR_AFTER_COMMIT: "500, charged or refunded all the same",
    Fault.Mode.TIMEOUT_AFTER_COMMIT: "charged or refunded, answered after delay_s",
    Fault.Mode.CALLBACK_DUPLICATES: "each notification sent copies times",
    Fault.Mode.CALLBACK_SHUFFLE: "the duplicates delivered out of order",
    Fault.Mode.CALLBACK_DROP: "no notification",
    Fault.Mode.LATE_SUCCESS: "declined now, carried out after delay_s and notified then",
    Fault.Mode.REQUIRES_ACTION: (
        "charges only: ACTION_REQUIRED with a client_secret and next_action, nothing "
        "debited, until the customer completes or abandons it at its /action URL "
        "(or the merchant closes it)"
    ),
    Fault.Mode.REFUND_REVERSAL: (
        "refunds only: SUCCESS at first, REVERSED after delay_s (the money back with "
        "the merchant) and notified then"
    ),
    Fault.Mode.DISPUTE_LOST: (
        "charges only: charged, disputed after delay_s (the money back with the payer) "
        "and lost after as long again, each step notified"
    ),
}


@extend_schema(exclude=True)
class MerchantApi(APIView):
    authentication_classes = [MerchantKeyAuthentication]
    permission_classes = [IsMerchant]
    throttle_classes = []  # a provider under test must not 429 the shop's retries


def answer_response(answer: Answer) -> Response:
    return Response(answer.body, headers={REPLAYED_HEADER: "true" if answer.replayed else "false"})


class ChargeCreateApi(MerchantApi):
    class InputSerializer(serializers.Serializer):
        out_trade_no = serializers.CharField(max_length=64, trim_whitespace=False)
        amount = StrictIntegerField(min_value=1, max_value=MAX_AMOUNT)
        currency = serializers.RegexField(r"^[A-Z]{3}$")
        payer = serializers.CharField(max_length=150, trim_whitespace=False)
        notify_url = serializers.CharField(max_length=2000, validators=[validate_notify_url])

    def post(self, request: Request) -> Response:
        # The order of checks: auth (initial), then the key, then the body.
        key = parse_idempotency_key(request.headers.get(IDEMPOTENCY_HEADER))
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # The provider's lines name the merchant's reference too (one grep follows it).
        context.bind(out_trade_no=serializer.validated_data["out_trade_no"])
        return answer_response(charge_create(idempotency_key=key, **serializer.validated_data))


class ChargeDetailApi(MerchantApi):
    def get(self, request: Request, out_trade_no: str) -> Response:
        return Response(charge_json(charge_get(out_trade_no=out_trade_no)))


class ChargeCloseApi(MerchantApi):
    def post(self, request: Request, out_trade_no: str) -> Response:
        return Response(charge_json(charge_close(out_trade_no=out_trade_no)))


@extend_schema(exclude=True)
class ChargeActionApi(APIView):
    """The customer completes or abandons a charge that waits for them.

    Not the merchant's call: the customer proves they may act with the charge's
    ``client_secret`` (which the merchant handed its client), as with Stripe.js.
    """

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    throttle_classes: list[type] = []

    class InputSerializer(serializers.Serializer):
        client_secret = serializers.CharField(max_length=64, trim_whitespace=False)
        result = serializers.ChoiceField(choices=["complete", "abandon"])

    def post(self, request: Request, out_trade_no: str) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        context.bind(out_trade_no=out_trade_no)
        charge = charge_customer_act(
            out_trade_no=out_trade_no,
            client_secret=serializer.validated_data["client_secret"],
            complete=serializer.validated_data["result"] == "complete",
        )
        return Response(charge_json(charge))


class RefundCreateApi(MerchantApi):
    class InputSerializer(serializers.Serializer):
        out_refund_no = serializers.CharField(max_length=64, trim_whitespace=False)
        out_trade_no = serializers.CharField(max_length=64, trim_whitespace=False)
        amount = StrictIntegerField(min_value=1, max_value=MAX_AMOUNT)
        notify_url = serializers.CharField(max_length=2000, validators=[validate_notify_url])

    def post(self, request: Request) -> Response:
        # The same order of checks as a charge: auth, the key, then the body.
        key = parse_idempotency_key(request.headers.get(IDEMPOTENCY_HEADER))
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        context.bind(
            out_refund_no=serializer.validated_data["out_refund_no"],
            out_trade_no=serializer.validated_data["out_trade_no"],
        )
        return answer_response(refund_create(idempotency_key=key, **serializer.validated_data))


class RefundDetailApi(MerchantApi):
    def get(self, request: Request, out_refund_no: str) -> Response:
        return Response(refund_json(refund_get(out_refund_no=out_refund_no)))


class DisputeDetailApi(MerchantApi):
    def get(self, request: Request, dispute_id: str) -> Response:
        return Response(dispute_json(dispute_get(dispute_id=dispute_id)))


class WalletDetailApi(MerchantApi):
    class OutputSerializer(serializers.Serializer):
        payer = serializers.CharField()
        balance = serializers.IntegerField()
        charged_total = serializers.IntegerField()
        refunded_total = serializers.IntegerField()
        disputed_total = serializers.IntegerField()
        charges = ChargeOutputSerializer(many=True)
        refunds = RefundOutputSerializer(many=True)
        disputes = DisputeOutputSerializer(many=True)

    def get(self, request: Request, payer: str) -> Response:
        wallet = wallet_get(payer=payer)
        data = {
            "payer": wallet.payer,
            "balance": wallet.balance,
            "charged_total": wallet.charged_total,
            "refunded_total": wallet.refunded_total,
            "disputed_total": wallet.disputed_total,
            "charges": wallet_charges(wallet=wallet),
            "refunds": wallet_refunds(wallet=wallet),
            "disputes": wallet_disputes(wallet=wallet),
        }
        return Response(self.OutputSerializer(data).data)


class StatementApi(MerchantApi):
    """The day's statement as CSV, streamed (see ``demo/sandbox/statements.py``)."""

    def get(self, request: Request, day: str) -> StreamingHttpResponse:
        parsed = statement_day(day)  # a bad date is a 400 before anything streams
        response = StreamingHttpResponse(statement_csv(parsed), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="statement-{parsed}.csv"'
        return response


@extend_schema(exclude=True)
class FaultListApi(APIView):
    # The shop's own auth (its default classes, spelled out): staff token or session.
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [IsAdminUser]
    throttle_classes = []

    class InputSerializer(serializers.Serializer):
        mode = serializers.ChoiceField(choices=Fault.Mode.choices)
        target = serializers.ChoiceField(choices=Fault.Target.choices, default=Fault.Target.CHARGE)
        count = StrictIntegerField(min_value=1, max_value=10_000, default=1)
        delay_s = serializers.FloatField(min_value=0, max_value=60, default=0.0)
        copies = StrictIntegerField(min_value=1, max_value=10, default=3)

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            # Some faults happen to one kind of operation only: a charge waits for the
            # customer or is disputed, a refund fails after succeeding. Given, the target
            # must be that one; not given, it is.
            fitting = ONE_TARGET_MODES.get(attrs["mode"])
            if fitting is not None and "target" not in self.initial_data:
                attrs["target"] = fitting
            elif fitting is not None and attrs["target"] != fitting:
                raise serializers.ValidationError({"target": f"{attrs['mode']} is for {fitting}s"})
            return attrs

    class OutputSerializer(serializers.Serializer):
        mode = serializers.CharField()
        target = serializers.CharField()
        remaining = serializers.IntegerField()
        delay_s = serializers.FloatField()
        copies = serializers.IntegerField()

    def get(self, request: Request) -> Response:
        return Response(self.OutputSerializer(fault_list_active(), many=True).data)

    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        fault_set(**serializer.validated_data)
        return Response(self.OutputSerializer(fault_list_active(), many=True).data, status=201)

    def delete(self, request: Request) -> Response:
        fault_clear()
        return Response(status=204)
