from django.contrib import admin

from config.admin import ReadOnlyAdmin
from payments.models import LedgerEntry, Payment


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
    search_fields = ("out_trade_no", "trade_no", "order__number", "payer")
    changed_through = (
        "A payment moves only through payment_settle (conditional updates): the pay "
        "request, the provider's notification or the reconciler."
    )


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ("trade_no", "order", "payment", "amount", "currency", "created_at")
    search_fields = ("trade_no", "order__number")
    changed_through = (
        "A ledger entry is written once, with the payment that captured the money "
        "(unique per order and per provider trade_no)."
    )
