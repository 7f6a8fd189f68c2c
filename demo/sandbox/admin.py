"""Read-only admin of the provider's tables: rows change through its API only."""

from django.conf import settings
from django.contrib import admin
from django.db.models import Model

from demo.sandbox.models import Charge, Fault, IdempotencyRecord, Notification, Refund, Wallet
from edge.admin import ReadOnlyAdmin


class ProviderAdmin(ReadOnlyAdmin):
    changed_through = "The provider's rows change only through its HTTP API (/sandbox/v1/...)."


class WalletAdmin(ProviderAdmin):
    list_display = ("payer", "balance", "charged_total", "refunded_total", "created_at")
    search_fields = ("payer",)


class ChargeAdmin(ProviderAdmin):
    list_display = (
        "trade_no",
        "out_trade_no",
        "status",
        "wallet",
        "amount",
        "currency",
        "decline_reason",
        "paid_at",
        "refunded_total",
        "late_success_at",
        "created_at",
    )
    list_filter = ("status", "currency")
    money_fields = {"amount": "currency", "refunded_total": "currency"}
    search_fields = ("trade_no", "out_trade_no", "wallet__payer")


class RefundAdmin(ProviderAdmin):
    list_display = (
        "refund_id",
        "out_refund_no",
        "charge",
        "status",
        "amount",
        "currency",
        "decline_reason",
        "refunded_at",
        "created_at",
    )
    list_filter = ("status", "currency")
    money_fields = {"amount": "currency"}
    search_fields = ("refund_id", "out_refund_no", "charge__out_trade_no", "charge__wallet__payer")


class IdempotencyRecordAdmin(ProviderAdmin):
    list_display = ("key", "charge", "refund", "response_status", "created_at")
    search_fields = ("key", "charge__out_trade_no", "refund__out_refund_no")


class NotificationAdmin(ProviderAdmin):
    list_display = (
        "notify_id",
        "copy",
        "charge",
        "refund",
        "status",
        "attempts",
        "last_status_code",
        "first_delay_s",
        "created_at",
        "delivered_at",
    )
    list_filter = ("status",)
    search_fields = (
        "notify_id",
        "charge__out_trade_no",
        "charge__trade_no",
        "refund__out_refund_no",
        "refund__refund_id",
    )


class FaultAdmin(ProviderAdmin):
    # Faults are armed and cleared through POST/DELETE /sandbox/v1/faults.
    list_display = ("mode", "target", "remaining", "delay_s", "copies", "updated_at")


class ProviderAdminSite(admin.AdminSite):
    """The admin of the provider's own server (demo/provider_urls.py): its tables only.

    The provider is another company: a staff login there sees its wallets, charges
    and notifications, never the shop's orders, ledger, users or tokens, though
    the demo keeps both in one database.
    """

    site_header = "Sandbox provider"
    site_title = "Sandbox provider"
    index_title = "The provider's tables"


# Named "admin" like Django's own: the admin's templates reverse "admin:..." URLs, and
# the provider's URL conf mounts this site alone.
provider_site = ProviderAdminSite(name="admin")

PROVIDER_TABLES: list[tuple[type[Model], type[ProviderAdmin]]] = [
    (Wallet, WalletAdmin),
    (Charge, ChargeAdmin),
    (Refund, RefundAdmin),
    (IdempotencyRecord, IdempotencyRecordAdmin),
    (Notification, NotificationAdmin),
    (Fault, FaultAdmin),
]

# Only where the sandbox is served (SANDBOX_ENABLED): a deployed shop's admin has no
# provider tables to show. The shop's admin of the demo and the tests shows them too.
if settings.SANDBOX_ENABLED:
    for model, model_admin in PROVIDER_TABLES:
        admin.site.register(model, model_admin)
        provider_site.register(model, model_admin)
