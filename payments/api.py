"""POST /api/v1/orders/{number}/pay/, .../cancel/ and .../refunds/: thin; the flows are in
payments/flows.py and payments/refund_flows.py.

Cancel lives here, beside pay, because both must respect the order's payment
attempts, which orders/ (a layer below) knows nothing of."""

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.request import Request

from edge.api import current_user_id
from edge.fields import StrictCharField, StrictIntegerField
from edge.openapi import ProblemSerializer
from idempotency.drf import IdempotentApi, idempotent_schema
from orders.api import EmptyInputSerializer
from orders.serializers import OrderOutputSerializer
from payments.cancel_flows import order_cancel_flow
from payments.flows import order_pay_flow
from payments.providers import get_provider
from payments.refund_flows import order_refund_flow
from payments.refunds import RefundRequest


class _NextActionSerializer(serializers.Serializer):
    type = serializers.CharField()
    url = serializers.CharField(required=False, help_text="The sandbox: where the customer acts.")


class _ActionSerializer(serializers.Serializer):
    client_secret = serializers.CharField(help_text="Hands the customer's client the attempt.")
    next_action = _NextActionSerializer(help_text="As the provider gives it (Stripe's, or ours).")


class PaymentActionSerializer(ProblemSerializer):
    """The 202 ``payment-action-required``: a problem, with what the client needs."""

    payment = serializers.CharField(help_text="The attempt's `out_trade_no`.")
    action = _ActionSerializer()


class OrderPayApi(IdempotentApi):
    @idempotent_schema(
        request=EmptyInputSerializer,
        summary="Pay an order",
        responses={
            200: OrderOutputSerializer,
            202: OpenApiResponse(
                PaymentActionSerializer,
                description=(
                    "`payment-action-required`: the provider waits for the customer (3-D "
                    "Secure); `action` holds what the client needs to finish it. Not stored: "
                    "send the SAME key again after the customer acted, for the final answer; "
                    "an attempt still waiting after `PAYMENT_ACTION_TIMEOUT_S` is closed and "
                    "answered 402 `payment-failed`"
                ),
            ),
            402: OpenApiResponse(
                ProblemSerializer,
                description=(
                    "`payment-declined` or `payment-failed` (stored and replayed; pay again with a "
                    "new key)"
                ),
            ),
            409: OpenApiResponse(
                ProblemSerializer,
                description=(
                    "`order-not-payable` (paid, cancelled, or a payment in progress; stored) or "
                    "`idempotency-key-in-use` (retry later with the same key)"
                ),
            ),
            503: OpenApiResponse(
                ProblemSerializer,
                description=(
                    "`payment-outcome-unknown`: the provider did not answer; retry with the SAME "
                    "key after `Retry-After` seconds (never charged twice)"
                ),
            ),
        },
    )
    def post(self, request: Request, number: str) -> HttpResponse:
        EmptyInputSerializer(data=request.data).is_valid(raise_exception=True)
        user_id = current_user_id(request)
        # The provider client is made inside the flow: a replay never needs it.
        return self.idempotent(
            request,
            lambda record: order_pay_flow(
                record, user_id=user_id, order_number=number, provider=get_provider()
            ),
        )


class OrderCancelApi(IdempotentApi):
    @idempotent_schema(
        request=EmptyInputSerializer,
        summary="Cancel an unpaid order",
        responses={
            200: OrderOutputSerializer,
            409: OpenApiResponse(
                ProblemSerializer,
                description=(
                    "`order-not-cancellable` (paid, cancelled, or a payment in progress; stored "
                    "and replayed) or `idempotency-key-in-use`"
                ),
            ),
        },
    )
    def post(self, request: Request, number: str) -> HttpResponse:
        EmptyInputSerializer(data=request.data).is_valid(raise_exception=True)
        user_id = current_user_id(request)
        return self.idempotent(
            request, lambda record: order_cancel_flow(record, user_id=user_id, order_number=number)
        )


class OrderRefundApi(IdempotentApi):
    class InputSerializer(serializers.Serializer):
        # Absent: the whole refundable rest. Capped like a product price: larger is a typo.
        amount = StrictIntegerField(min_value=1, max_value=10**12, required=False)
        reason = StrictCharField(max_length=200, required=False, allow_blank=True)

    @idempotent_schema(
        request=InputSerializer,
        summary="Refund an order (owner or staff)",
        responses={
            200: OrderOutputSerializer,
            402: OpenApiResponse(
                ProblemSerializer,
                description="`refund-declined` (stored and replayed; refund again with a new key)",
            ),
            409: OpenApiResponse(
                ProblemSerializer,
                description=(
                    "`order-not-refundable` (not PAID, or a refund in progress; stored), "
                    "`refund-exceeds-paid` (more than is left to refund; stored), "
                    "`idempotency-key-reused` (the key already refunded this order and its "
                    "record expired) or `idempotency-key-in-use`"
                ),
            ),
            503: OpenApiResponse(
                ProblemSerializer,
                description=(
                    "`refund-outcome-unknown`: the provider did not answer; retry with the SAME "
                    "key after `Retry-After` seconds (never refunded twice)"
                ),
            ),
        },
    )
    def post(self, request: Request, number: str) -> HttpResponse:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        refund_request = RefundRequest(
            user_id=current_user_id(request),
            is_staff=request.user.is_staff,
            order_number=number,
            amount=serializer.validated_data.get("amount"),
            reason=serializer.validated_data.get("reason", ""),
        )
        return self.idempotent(
            request,
            lambda record: order_refund_flow(
                record, request=refund_request, provider=get_provider()
            ),
        )
