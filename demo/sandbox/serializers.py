"""Charges and refunds as the sandbox shows them: in answers, stored replays, wallets."""

from typing import Any

from django.urls import reverse
from rest_framework import serializers

from demo.sandbox.models import Charge, Dispute, Refund


class ChargeOutputSerializer(serializers.Serializer):
    trade_no = serializers.CharField()
    out_trade_no = serializers.CharField()
    status = serializers.CharField()
    amount = serializers.IntegerField(allow_null=True)
    currency = serializers.CharField(allow_null=True)
    payer = serializers.CharField(allow_null=True)
    paid_at = serializers.DateTimeField(allow_null=True)
    decline_reason = serializers.CharField(allow_null=True)
    # Only while ACTION_REQUIRED (left out otherwise): what the merchant hands its client
    # so that the customer can act.
    client_secret = serializers.SerializerMethodField()
    next_action = serializers.SerializerMethodField()

    def to_representation(self, charge: Charge) -> dict[str, Any]:
        data = dict(super().to_representation(charge))
        if charge.status != Charge.Status.ACTION_REQUIRED:
            del data["client_secret"], data["next_action"]
        return data

    def get_client_secret(self, charge: Charge) -> str | None:
        return charge.client_secret if charge.status == Charge.Status.ACTION_REQUIRED else None

    def get_next_action(self, charge: Charge) -> dict[str, str] | None:
        if charge.status != Charge.Status.ACTION_REQUIRED:
            return None
        url = reverse("sandbox-charge-action", kwargs={"out_trade_no": charge.out_trade_no})
        return {"type": "customer_action", "url": url}


class RefundOutputSerializer(serializers.Serializer):
    refund_id = serializers.CharField()
    out_refund_no = serializers.CharField()
    out_trade_no = serializers.CharField()
    status = serializers.CharField()
    amount = serializers.IntegerField()
    currency = serializers.CharField(allow_null=True)
    refunded_at = serializers.DateTimeField(allow_null=True)
    decline_reason = serializers.CharField(allow_null=True)
    reversed_at = serializers.DateTimeField(allow_null=True)


class DisputeOutputSerializer(serializers.Serializer):
    dispute_id = serializers.CharField()
    trade_no = serializers.CharField(source="charge.trade_no")
    out_trade_no = serializers.CharField(source="charge.out_trade_no")
    status = serializers.CharField()
    amount = serializers.IntegerField()
    currency = serializers.CharField()
    reason = serializers.CharField()
    withdrawn = serializers.IntegerField()
    reinstated = serializers.IntegerField()
    opened_at = serializers.DateTimeField()
    closed_at = serializers.DateTimeField(allow_null=True)


def charge_json(charge: Charge) -> dict[str, Any]:
    """The JSON-ready dict of a charge (what the idempotency record stores)."""
    return dict(ChargeOutputSerializer(charge).data)


def refund_json(refund: Refund) -> dict[str, Any]:
    """The JSON-ready dict of a refund (what the idempotency record stores)."""
    return dict(RefundOutputSerializer(refund).data)


def dispute_json(dispute: Dispute) -> dict[str, Any]:
    """The JSON-ready dict of a dispute (its answers and its notifications)."""
    return dict(DisputeOutputSerializer(dispute).data)
