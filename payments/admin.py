from django.contrib import admin

from payments.models import LedgerEntry, Payment


@admin.register(Payment)
class PaymentAdmin(admin.ModelAdmin):
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
    # Payments change only through payment_settle (conditional updates).
    readonly_fields = [field.name for field in Payment._meta.fields]


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    list_display = ("trade_no", "order", "payment", "amount", "currency", "created_at")
    search_fields = ("trade_no", "order__number")
    readonly_fields = [field.name for field in LedgerEntry._meta.fields]
