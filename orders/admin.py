from django.contrib import admin

from orders.models import InventoryMovement, Order, OrderLine, Product


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ("sku", "name", "price", "currency", "stock")
    search_fields = ("sku", "name")
    # Stock moves only through services (conditional updates + movements).
    readonly_fields = ("stock",)


class OrderLineInline(admin.TabularInline):
    model = OrderLine
    extra = 0
    can_delete = False
    readonly_fields = ("product", "sku", "unit_price", "quantity")


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ("number", "user", "status", "amount", "currency", "created_at", "paid_at")
    list_filter = ("status", "currency")
    search_fields = ("number", "user__username", "idempotency_key")
    readonly_fields = (
        "number",
        "user",
        "status",
        "allowed_transitions",
        "amount",
        "currency",
        "idempotency_key",
        "created_at",
        "paid_at",
    )
    inlines = [OrderLineInline]

    @admin.display(description="Allowed transitions")
    def allowed_transitions(self, order: Order) -> str:
        # Read from the state machine itself; changed only through the API's services.
        # (django-fsm adds get_available_<field>_transitions at class creation.)
        available = order.get_available_status_transitions()  # type: ignore[attr-defined]
        moves = [f"{t.name} → {t.target}" for t in available]
        return ", ".join(moves) or "none (final state)"


@admin.register(InventoryMovement)
class InventoryMovementAdmin(admin.ModelAdmin):
    list_display = ("product", "order", "kind", "quantity", "created_at")
    list_filter = ("kind",)
    readonly_fields = ("product", "order", "kind", "quantity", "created_at")
