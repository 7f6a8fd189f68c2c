"""The order representation: returned by the API and stored for replays."""

from rest_framework import serializers

from orders.models import Order, OrderLine


class OrderLineOutputSerializer(serializers.ModelSerializer[OrderLine]):
    class Meta:
        model = OrderLine
        fields = ["sku", "unit_price", "quantity"]


class OrderOutputSerializer(serializers.ModelSerializer[Order]):
    lines = OrderLineOutputSerializer(many=True, read_only=True)

    class Meta:
        model = Order
        fields = ["number", "status", "amount", "currency", "lines", "created_at", "paid_at"]
