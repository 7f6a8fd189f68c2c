from django.contrib import admin

from callbacks.models import ProviderNotification


@admin.register(ProviderNotification)
class ProviderNotificationAdmin(admin.ModelAdmin):
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
    search_fields = ("notify_id", "trade_no", "out_trade_no")
    readonly_fields = [field.name for field in ProviderNotification._meta.fields]

    def has_add_permission(self, request: object) -> bool:
        return False  # written by the provider only
