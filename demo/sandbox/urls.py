from django.urls import path

from demo.sandbox.api import (
    ChargeActionApi,
    ChargeCloseApi,
    ChargeCreateApi,
    ChargeDetailApi,
    DisputeDetailApi,
    FaultListApi,
    IndexApi,
    RefundCreateApi,
    RefundDetailApi,
    StatementApi,
    WalletDetailApi,
)

# No trailing slashes: the provider's contract spells its URLs this way. ``path``
# converters, so an out_trade_no, out_refund_no or payer holding a "/" is still addressable; the
# close and action routes come first, so ".../close" and ".../action" always mean those.
urlpatterns = [
    path("", IndexApi.as_view(), name="sandbox-index"),
    path("v1/charges", ChargeCreateApi.as_view(), name="sandbox-charge-create"),
    path(
        "v1/charges/<path:out_trade_no>/close",
        ChargeCloseApi.as_view(),
        name="sandbox-charge-close",
    ),
    path(
        "v1/charges/<path:out_trade_no>/action",
        ChargeActionApi.as_view(),
        name="sandbox-charge-action",
    ),
    path("v1/charges/<path:out_trade_no>", ChargeDetailApi.as_view(), name="sandbox-charge"),
    path("v1/refunds", RefundCreateApi.as_view(), name="sandbox-refund-create"),
    path("v1/refunds/<path:out_refund_no>", RefundDetailApi.as_view(), name="sandbox-refund"),
    path("v1/disputes/<path:dispute_id>", DisputeDetailApi.as_view(), name="sandbox-dispute"),
    path("v1/wallets/<path:payer>", WalletDetailApi.as_view(), name="sandbox-wallet"),
    path("v1/statements/<str:day>", StatementApi.as_view(), name="sandbox-statement"),
    path("v1/faults", FaultListApi.as_view(), name="sandbox-faults"),
]
