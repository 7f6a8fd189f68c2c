from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from edge.admin import MoneyColumns, ReadOnlyAdmin, ReadOnlyInline
from orders.models import InventoryMovement, Order, OrderLine, Product, Shipment
from orders.services import product_create


@admin.register(Product)
class ProductAdmin(MoneyColumns, admin.ModelAdmin):
    list_display = ("sku", "name", "price", "currency", "stock")
    money_fields = {"price": "currency"}
    search_fields = ("sku", "name")
    # Stock moves only through services (conditional updates + movements); a product
    # added here starts with none, and its restock is a movement too.
    readonly_fields = ("stock",)

    def save_model(self, request: HttpRequest, obj: Product, form: Any, change: bool) -> None:
        if change:  # name, price: plain attributes; stock is read-only here
            super().save_model(request, obj, form, change)
            return
        created = product_create(
            sku=obj.sku, name=obj.name, price=obj.price, currency=obj.currency, stock=0
        )
        obj.pk, obj.stock, obj.created_at = created.pk, created.stock, created.created_at


class OrderLineInline(ReadOnlyInline):
    model = OrderLine
    money_fields = {"unit_price": "order.currency"}


@admin.register(Order)
class OrderAdmin(ReadOnlyAdmin):
    list_display = (
        "number",
        "user",
        "status",
        "amount",
        "refunded_amount",
        "currency",
        "created_at",
        "paid_at",
    )
    list_filter = ("status", "currency")
    money_fields = {"amount": "currency", "refunded_amount": "currency"}
    search_fields = ("number", "user__username", "idempotency_key")
    readonly_fields = ("allowed_transitions",)
    inlines = [OrderLineInline]
    changed_through = (
        "An order changes only through its services and their state machine: paid by a "
        "settled payment, cancelled by a cancel (POST /api/v1/orders/{number}/cancel/) or "
        "the expiry task, refunded by a refund (POST /api/v1/orders/{number}/refunds/)."
    )

    @admin.display(description="Allowed transitions")
    def allowed_transitions(self, order: Order) -> str:
        # Read from the state machine itself; changed only through the API's services.
        # Every transition out of the current state, the ones waiting on a condition
        # too (a PAID order is not final: it becomes REFUNDED once fully refunded).
        # (django-fsm adds get_all_<field>_transitions at class creation.)
        every = order.get_all_status_transitions()  # type: ignore[attr-defined]
        moves = [
            f"{t.name} → {t.target}{_waiting_on(t, order)}"
            for t in sorted(every, key=lambda t: t.name)
            if t.source in (order.status, "*") or (t.source == "+" and t.target != order.status)
        ]
        return ", ".join(moves) or "none (final state)"


def _waiting_on(transition: Any, order: Order) -> str:
    """The conditions a transition still waits on, as words: ``" (when fully refunded)"``."""
    unmet = [c for c in transition.conditions if not c(order)]
    return "".join(f" (when {c.__name__.strip('_').replace('_', ' ')})" for c in unmet)


@admin.register(InventoryMovement)
class InventoryMovementAdmin(ReadOnlyAdmin):
    list_display = ("product", "order", "kind", "quantity", "created_at")
    list_filter = ("kind",)
    changed_through = (
        "Movements are written with the stock change they explain: an order, a cancel, a restock."
    )


@admin.register(Shipment)
class ShipmentAdmin(ReadOnlyAdmin):
    list_display = ("order", "created_at")
    search_fields = ("order__number",)
    changed_through = (
        "A shipment is made once per PAID order by the fulfil task (or its sweep); a "
        "redelivered task inserts nothing."
    )
