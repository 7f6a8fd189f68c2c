"""The charge as the sandbox shows it: in answers, in stored replays, in wallets."""

from typing import Any

from rest_framework import serializers

from sandbox.models import Charge


class ChargeOutputSerializer(serializers.Serializer):
    trade_no = serializers.CharField()
    out_trade_no = serializers.CharField()
    status = serializers.CharField()
    amount = serializers.IntegerField(allow_null=True)
    currency = serializers.CharField(allow_null=True)
    payer = serializers.CharField(allow_null=True)
    paid_at = serializers.DateTimeField(allow_null=True)
    decline_reason = serializers.CharField(allow_null=True)


def charge_json(charge: Charge) -> dict[str, Any]:
    """The JSON-ready dict of a charge (what the idempotency record stores)."""
    return dict(ChargeOutputSerializer(charge).data)
