"""Thin HTTP endpoints for the catalogue and orders: validate, call, serialize."""

from typing import Any

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.permissions import SAFE_METHODS, AllowAny, BasePermission, IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.dbrouter import allow_stale_reads
from edge.api import current_user_id, paginated_response
from edge.fields import StrictCharField, StrictIntegerField, StrictRegexField
from edge.openapi import ProblemSerializer
from edge.pagination import PageNumberPagination
from idempotency.drf import IdempotentApi, idempotent_schema
from orders.flows import order_create_flow
from orders.selectors import order_get, order_list, product_list
from orders.serializers import OrderOutputSerializer
from orders.services import LineRequest, product_create


class ProductListCreateApi(APIView):
    pagination_class = PageNumberPagination

    @extend_schema_serializer(component_name="ProductInput")
    class InputSerializer(serializers.Serializer):
        sku = StrictRegexField(r"^[A-Za-z0-9][A-Za-z0-9\-_.]{0,63}$")
        name = StrictCharField(max_length=200)
        price = StrictIntegerField(min_value=0, max_value=10**12)
        currency = StrictRegexField(r"^[A-Z]{3}$")
        stock = StrictIntegerField(min_value=0, max_value=10**9)

    @extend_schema_serializer(component_name="Product")
    class OutputSerializer(serializers.Serializer):
        sku = serializers.CharField()
        name = serializers.CharField()
        price = serializers.IntegerField()
        currency = serializers.CharField()
        stock = serializers.IntegerField()

    def get_permissions(self) -> list[BasePermission]:
        # Everyone may browse the catalogue; only staff change it.
        return [AllowAny()] if self.request.method in SAFE_METHODS else [IsAdminUser()]

    @extend_schema(responses=OutputSerializer(many=True), summary="List products")
    @allow_stale_reads
    def get(self, request: Request) -> Response:
        return paginated_response(request, self, product_list(), self.OutputSerializer)

    @extend_schema(
        request=InputSerializer,
        summary="Create a product (staff)",
        responses={
            201: OutputSerializer,
            409: OpenApiResponse(ProblemSerializer, description="`sku-exists`"),
        },
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        product = product_create(**serializer.validated_data)
        return Response(self.OutputSerializer(product).data, status=201)


class OrderListCreateApi(IdempotentApi):
    pagination_class = PageNumberPagination

    @extend_schema_serializer(component_name="OrderInput")
    class InputSerializer(serializers.Serializer):
        @extend_schema_serializer(component_name="OrderLineInput")
        class LineSerializer(serializers.Serializer):
            sku = StrictCharField(max_length=64)
            quantity = StrictIntegerField(min_value=1, max_value=settings.ORDER_MAX_QUANTITY)

        lines = serializers.ListField(
            child=LineSerializer(), min_length=1, max_length=settings.ORDER_MAX_LINES
        )

        def validate_lines(self, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
            skus = [line["sku"] for line in lines]
            if len(set(skus)) != len(skus):
                raise serializers.ValidationError("Each SKU may appear once per order.")
            return lines

    @extend_schema(responses=OrderOutputSerializer(many=True), summary="List my orders")
    @allow_stale_reads
    def get(self, request: Request) -> Response:
        orders = order_list(user_id=current_user_id(request))
        return paginated_response(request, self, orders, OrderOutputSerializer)

    @idempotent_schema(
        request=InputSerializer,
        summary="Create an order",
        responses={
            201: OrderOutputSerializer,
            409: OpenApiResponse(
                ProblemSerializer,
                description=(
                    "`out-of-stock` (stored, replayed), `idempotency-key-in-use` (retry later with "
                    "the same key) or `idempotency-key-reused` (the key's record expired)"
                ),
            ),
        },
    )
    def post(self, request: Request) -> HttpResponse:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        lines = [LineRequest(**line) for line in serializer.validated_data["lines"]]
        user_id = current_user_id(request)
        return self.idempotent(
            request, lambda record: order_create_flow(record, user_id=user_id, lines=lines)
        )


class OrderDetailApi(APIView):
    @extend_schema(responses=OrderOutputSerializer, summary="One of my orders")
    def get(self, request: Request, number: str) -> Response:
        return Response(
            OrderOutputSerializer(order_get(user_id=current_user_id(request), number=number)).data
        )


class EmptyInputSerializer(serializers.Serializer):
    """Actions on an order take no fields; the body may be empty or ``{}``."""
