"""The order representation: returned by the API and stored for replays."""

from collections.abc import Collection
from typing import Any

from rest_framework import serializers

from orders.models import Order, OrderLine


class OrderLineOutputSerializer(serializers.ModelSerializer[OrderLine]):
    class Meta:
        model = OrderLine
        fields = ["sku", "unit_price", "quantity"]


class PaymentSummarySerializer(serializers.Serializer):
    """One payment attempt, as part of its order (payments/ owns the model)."""

    out_trade_no = serializers.CharField()
    status = serializers.CharField()
    amount = serializers.IntegerField()
    currency = serializers.CharField()
    trade_no = serializers.CharField(allow_null=True)


class RefundSummarySerializer(serializers.Serializer):
    """One refund attempt of the order (payments/ owns the model)."""

    refund_no = serializers.CharField()
    status = serializers.CharField()
    amount = serializers.IntegerField()
    reason = serializers.CharField()
    refund_id = serializers.CharField(allow_null=True)


class OrderOutputSerializer(serializers.ModelSerializer[Order]):
    lines = OrderLineOutputSerializer(many=True, read_only=True)
    payments = PaymentSummarySerializer(many=True, read_only=True)
    refunds = RefundSummarySerializer(many=True, read_only=True)

    class Meta:
        model = Order
        fields = [
            "number",
            "status",
            "amount",
            "currency",
            "lines",
            "payments",
            "refunded_amount",
            "refunds",
            "created_at",
            "paid_at",
        ]


def order_representation(*, order_id: int) -> Any:
    """The order as the API shows it, read fresh (after a phase changed it)."""
    order = Order.objects.prefetch_related("lines", "payments", "refunds").get(pk=order_id)
    return OrderOutputSerializer(order).data


def order_representations(*, order_ids: Collection[int]) -> dict[int, Any]:
    """``order_representation`` of many orders, by id, in one read of each table."""
    orders = list(
        Order.objects.prefetch_related("lines", "payments", "refunds").filter(pk__in=order_ids)
    )
    # many=True: the serializer's fields are built once for the list, not once per order.
    bodies = OrderOutputSerializer(orders, many=True).data
    return {order.pk: body for order, body in zip(orders, bodies, strict=True)}
