"""POST /api/v1/orders/{number}/pay/ and .../cancel/: thin; the flows are in payments/flows.py.

Cancel lives here, beside pay, because both must respect the order's payment
attempts, which orders/ (a layer below) knows nothing of."""

from drf_spectacular.utils import OpenApiResponse
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import current_user_id
from config.openapi import ProblemSerializer
from idempotency.drf import IdempotentApi, idempotent_schema
from orders.api import EmptyInputSerializer
from orders.serializers import OrderOutputSerializer
from payments.flows import order_cancel_flow, order_pay_flow
from payments.providers import get_provider


class OrderPayApi(IdempotentApi):
    @idempotent_schema(
        request=EmptyInputSerializer,
        summary="Pay an order",
        responses={
            200: OrderOutputSerializer,
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
    def post(self, request: Request, number: str) -> Response:
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
    def post(self, request: Request, number: str) -> Response:
        EmptyInputSerializer(data=request.data).is_valid(raise_exception=True)
        user_id = current_user_id(request)
        return self.idempotent(
            request, lambda record: order_cancel_flow(record, user_id=user_id, order_number=number)
        )
