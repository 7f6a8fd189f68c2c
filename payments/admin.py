from django.contrib import admin

from edge.admin import ReadOnlyAdmin
from payments.models import LedgerEntry, Payment, Refund


@admin.register(Payment)
class PaymentAdmin(ReadOnlyAdmin):
    list_display = (
        "out_trade_no",
        "order",
        "status",
        "amount",
        "currency",
        "trade_no",
        "failure_code",
        "created_at",
        "settled_at",
    )
    list_filter = ("status", "currency")
    money_fields = {"amount": "currency"}
    search_fields = ("out_trade_no", "trade_no", "order__number", "payer")
    changed_through = (
        "A payment moves only through payment_settle (conditional updates): the pay "
        "request, the provider's notification or the reconciler."
    )


@admin.register(Refund)
class RefundAdmin(ReadOnlyAdmin):
    list_display = (
        "refund_no",
        "order",
        "payment",
        "status",
        "amount",
        "currency",
        "reason",
        "refund_id",
        "created_at",
        "settled_at",
    )
    list_filter = ("status", "currency")
    money_fields = {"amount": "currency"}
    search_fields = ("refund_no", "refund_id", "order__number", "payment__out_trade_no")
    changed_through = (
        "A refund is made by POST /api/v1/orders/{number}/refunds/ (the order page's Refund "
        "button), or started by the shop for an orphaned capture, and settled only by "
        "refund_settle: the request, the provider's notification or the reconciler."
    )


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = (
        "kind",
        "trade_no",
        "refund_id",
        "order",
        "payment",
        "amount",
        "currency",
        "created_at",
    )
    list_filter = ("kind", "currency")
    money_fields = {"amount": "currency"}
    search_fields = ("trade_no", "refund_id", "order__number")
    changed_through = (
        "A ledger entry is written once, with the settle that moved the money: a capture "
        "(unique per order, per attempt and per provider trade_no), a refund (unique per "
        "refund attempt and per provider refund_id), or an orphaned capture and its refund."
    )
