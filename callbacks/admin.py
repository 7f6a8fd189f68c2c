from django.contrib import admin

from callbacks.models import ProviderNotification
from edge.admin import ReadOnlyAdmin


@admin.register(ProviderNotification)
class ProviderNotificationAdmin(ReadOnlyAdmin):
    list_display = (
        "notify_id",
        "out_trade_no",
        "trade_status",
        "amount",
        "currency",
        "outcome",
        "response_status",
        "received_at",
    )
    list_filter = ("outcome", "trade_status", "provider", "response_status")
    money_fields = {"amount": "currency"}
    search_fields = ("notify_id", "trade_no", "out_trade_no")
    changed_through = "Notifications are written by the provider's callbacks only."
