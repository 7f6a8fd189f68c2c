"""POST /api/v1/callbacks/sandbox/ and /api/v1/callbacks/stripe/: each provider's
notifications come in at its own endpoint (the adapter's ``callback_route``)."""

import hashlib
import logging

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_serializer,
)
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from callbacks.errors import CallbackMalformed, SignatureInvalid
from callbacks.services import callback_ingest, callback_store_unapplied
from edge.bounds import BIGINT_MAX
from edge.errors import PROBLEM_CONTENT_TYPE
from edge.fields import StrictCharField
from edge.openapi import ProblemSerializer
from edge.throttling import CallbackRateThrottle
from observability import context
from payments.providers import (
    ChargeStatus,
    DisputeNotification,
    DisputeStatus,
    Notification,
    NotificationMalformed,
    NotificationNotApplied,
    NotificationSignatureInvalid,
    PaymentProvider,
    RefundNotification,
    RefundStatus,
    get_provider,
)
from payments.providers.sandbox_parsing import DISPUTE_EVENT, MAX_TEXT, REFUND_EVENT
from payments.providers.sandbox_signature import (
    MAX_SIGNATURES,
    SIGNATURE_HEADER,
    SIGNATURE_HEADER_PATTERN,
)

logger = logging.getLogger(__name__)


@extend_schema_serializer(component_name="SandboxChargeNotification")
class ChargeNotificationSerializer(serializers.Serializer):
    """The body the sandbox signs and sends when a charge settles (schema only)."""

    notify_id = StrictCharField(max_length=MAX_TEXT)
    trade_no = StrictCharField(max_length=MAX_TEXT)
    out_trade_no = StrictCharField(max_length=MAX_TEXT)
    trade_status = serializers.ChoiceField(choices=[status.value for status in ChargeStatus])
    amount = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX)
    currency = serializers.RegexField(r"^[A-Z]{3}$")
    paid_at = serializers.DateTimeField(required=False, allow_null=True)


@extend_schema_serializer(component_name="SandboxRefundNotification")
class RefundNotificationSerializer(serializers.Serializer):
    """The body the sandbox signs and sends when a refund settles (schema only)."""

    event = serializers.ChoiceField(choices=[REFUND_EVENT])
    notify_id = StrictCharField(max_length=MAX_TEXT)
    refund_id = StrictCharField(max_length=MAX_TEXT)
    out_refund_no = StrictCharField(max_length=MAX_TEXT)
    out_trade_no = StrictCharField(max_length=MAX_TEXT)
    status = serializers.ChoiceField(choices=[status.value for status in RefundStatus])
    amount = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX)
    currency = serializers.RegexField(r"^[A-Z]{3}$", required=False)
    refunded_at = serializers.DateTimeField(required=False, allow_null=True)
    # A REVERSED refund: when it failed after it went through.
    reversed_at = serializers.DateTimeField(required=False, allow_null=True)


@extend_schema_serializer(component_name="SandboxDisputeNotification")
class DisputeNotificationSerializer(serializers.Serializer):
    """The body the sandbox signs and sends when a dispute opens or closes (schema only)."""

    event = serializers.ChoiceField(choices=[DISPUTE_EVENT])
    notify_id = StrictCharField(max_length=MAX_TEXT)
    dispute_id = StrictCharField(max_length=MAX_TEXT)
    trade_no = StrictCharField(max_length=MAX_TEXT)
    out_trade_no = StrictCharField(max_length=MAX_TEXT)
    status = serializers.ChoiceField(choices=[status.value for status in DisputeStatus])
    amount = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX)
    currency = serializers.RegexField(r"^[A-Z]{3}$")
    reason = StrictCharField(max_length=MAX_TEXT, required=False)
    withdrawn = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX)
    reinstated = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX)
    opened_at = serializers.DateTimeField(required=False, allow_null=True)
    closed_at = serializers.DateTimeField(required=False, allow_null=True)


# A charge's notification has no ``event``; a refund's says ``"event": "refund"``, a
# dispute's ``"event": "dispute"``.
NOTIFICATION_BODY = PolymorphicProxySerializer(
    component_name="SandboxNotification",
    serializers=[
        ChargeNotificationSerializer,
        RefundNotificationSerializer,
        DisputeNotificationSerializer,
    ],
    resource_type_field_name=None,
)


SIGNATURE_PARAMETER = OpenApiParameter(
    name=SIGNATURE_HEADER,
    type={"type": "string", "pattern": SIGNATURE_HEADER_PATTERN},
    location=OpenApiParameter.HEADER,
    required=True,
    description=(
        '`t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`; up to '
        f"{MAX_SIGNATURES} `v1` while secrets rotate. A `t` more than 300 s from the "
        "shop's clock (older or newer) is refused."
    ),
)


class SandboxCallbackApi(APIView):
    # The signature is the authentication: no user, no session, no CSRF. Throttled per
    # source address only, generously: the provider retries until it gets a 2xx, so a
    # 429 (with Retry-After) delays money, and stops a flood before any work is done.
    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = [CallbackRateThrottle]
    # No parsers: the signature covers the raw bytes, and nothing reads the body
    # before the signature checks out.
    parser_classes = []

    @extend_schema(
        # Documented as JSON although no parser reads it: the signature covers the raw
        # bytes, which are parsed (strictly) only once it checks out.
        request={"application/json": NOTIFICATION_BODY},
        parameters=[SIGNATURE_PARAMETER],
        summary="Provider notification (signed)",
        responses={
            200: OpenApiResponse(description="Received (applied, or already applied)"),
            400: OpenApiResponse(
                ProblemSerializer, description="`signature-invalid` or `callback-malformed`"
            ),
            413: OpenApiResponse(ProblemSerializer, description="`payload-too-large`"),
            422: OpenApiResponse(
                ProblemSerializer,
                description=(
                    "`callback-mismatch` or `callback-unknown-payment`: recorded, not applied, "
                    "the same answer on every redelivery"
                ),
            ),
        },
    )
    def post(self, request: Request) -> Response:
        provider = get_provider()
        if not _is_own_endpoint(provider, request):
            raise NotFound()
        raw_body = request.body
        try:
            notification = provider.verify_notification(headers=request.headers, raw_body=raw_body)
        except (NotificationSignatureInvalid, NotificationMalformed) as error:
            # Logged for forensics: who, how much, what was wrong. Never the
            # signature or the secret.
            logger.warning(
                "notification refused: %s (from %s, %d bytes, sha256 %s)",
                error,
                request.META.get("REMOTE_ADDR"),
                len(raw_body),
                hashlib.sha256(raw_body).hexdigest()[:16],
            )
            if isinstance(error, NotificationSignatureInvalid):
                raise SignatureInvalid() from error
            raise CallbackMalformed(reason=str(error)) from error
        context.bind(out_trade_no=notification.out_trade_no, notify_id=notification.notify_id)
        if isinstance(notification, RefundNotification):
            context.bind(out_refund_no=notification.out_refund_no)
        answer = callback_ingest(
            notification=notification, raw_body=raw_body, provider=provider.name
        )
        status = _status_of(notification)
        logger.info(
            "notification %s %s: %s%s",
            status,
            notification.notify_id,
            answer.outcome,
            " (redelivery)" if answer.replayed else "",
        )
        response = Response(answer.body, status=answer.status)
        if answer.status >= 400:
            response.content_type = PROBLEM_CONTENT_TYPE
        return response


STRIPE_SIGNATURE_PARAMETER = OpenApiParameter(
    name="Stripe-Signature",
    type=str,
    location=OpenApiParameter.HEADER,
    required=True,
    description=(
        "Stripe's `t=<unix seconds>,v1=<hex HMAC-SHA256>`, verified by the official SDK "
        "with STRIPE_WEBHOOK_SECRET; a `t` more than 300 s old is refused. The SDK checks "
        "the age only: a `t` ahead of the shop's clock passes."
    ),
)


class StripeCallbackApi(APIView):
    """Stripe's webhook events (PAYMENT_PROVIDER=stripe): the endpoint configured in
    Stripe's dashboard. Applied: payment_intent.succeeded / payment_failed /
    canceled, charge.refunded, refund.updated; any other verified event is stored
    and acknowledged. Unique on the event id per provider, in the effect's
    transaction, as for the sandbox.

    Every stored event is answered 200, whatever its outcome (a mismatch, a
    reference the shop never used), with the outcome in the body: Stripe
    retries anything else for days and may disable the endpoint, and a stored
    event will never read differently. Only a bad signature (400) and an outage
    (503, the database away) ask Stripe to send it again."""

    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = [CallbackRateThrottle]
    parser_classes = []

    @extend_schema(
        request={"application/json": {"type": "object"}},
        parameters=[STRIPE_SIGNATURE_PARAMETER],
        summary="Stripe webhook event (signed)",
        responses={
            200: OpenApiResponse(
                description=(
                    'Stored: `{"received": true, "outcome": ...}` (applied, duplicate, '
                    "deferred, ignored; rejected or unmatched with the problem's `code` and "
                    "`detail`), the same on every redelivery"
                )
            ),
            400: OpenApiResponse(
                ProblemSerializer, description="`signature-invalid` or `callback-malformed`"
            ),
            404: OpenApiResponse(ProblemSerializer, description="the shop does not use Stripe"),
            503: OpenApiResponse(ProblemSerializer, description="an outage: Stripe sends it again"),
        },
    )
    def post(self, request: Request) -> Response:
        if not request.headers.get("Stripe-Signature"):
            # Unsigned is refused first, whichever provider the shop uses: nothing stored.
            raise SignatureInvalid("The Stripe-Signature header is missing.")
        provider = get_provider()
        if not _is_own_endpoint(provider, request):
            raise NotFound()
        raw_body = request.body
        try:
            notification = provider.verify_notification(headers=request.headers, raw_body=raw_body)
        except NotificationNotApplied as other:
            answer = callback_store_unapplied(
                notify_id=other.notify_id,
                kind=other.kind,
                raw_body=raw_body,
                provider=provider.name,
            )
            return Response(answer.body, status=answer.status)
        except (NotificationSignatureInvalid, NotificationMalformed) as error:
            logger.warning(
                "Stripe event refused: %s (from %s, %d bytes)",
                error,
                request.META.get("REMOTE_ADDR"),
                len(raw_body),
            )
            if isinstance(error, NotificationSignatureInvalid):
                raise SignatureInvalid(
                    "The Stripe-Signature header does not verify this body."
                ) from error
            raise CallbackMalformed(reason=str(error)) from error
        context.bind(out_trade_no=notification.out_trade_no, notify_id=notification.notify_id)
        answer = callback_ingest(
            notification=notification,
            raw_body=raw_body,
            provider=provider.name,
            acknowledge_stored=True,
        )
        return Response(answer.body, status=answer.status)


def _status_of(notification: Notification | RefundNotification | DisputeNotification) -> str:
    if isinstance(notification, RefundNotification):
        return notification.status
    if isinstance(notification, DisputeNotification):
        return f"dispute {notification.dispute.status}"
    return notification.trade_status


def _is_own_endpoint(provider: PaymentProvider, request: Request) -> bool:
    """Each provider's notifications come to its own endpoint (its ``callback_route``);
    the others are not there for a shop that does not use their provider."""
    return request.resolver_match is not None and (
        request.resolver_match.url_name == provider.callback_route
    )
