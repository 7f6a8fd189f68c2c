"""Catalogue, inventory movements and orders."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django_fsm import FSMField, transition


class Product(models.Model):
    sku = models.CharField(max_length=64)
    name = models.CharField(max_length=200)
    price = models.PositiveBigIntegerField(help_text="Minor units (fen, cents).")
    currency = models.CharField(max_length=3)
    # Changed only by conditional UPDATEs (orders/services.py); the database refuses
    # a negative value even if a bug tried.
    stock = models.IntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["sku"]
        constraints = [
            models.UniqueConstraint(fields=["sku"], name="product_sku_unique"),
            models.CheckConstraint(condition=Q(stock__gte=0), name="product_stock_non_negative"),
            models.CheckConstraint(
                condition=Q(currency__regex=r"^[A-Z]{3}$"), name="product_currency_iso"
            ),
        ]

    def __str__(self) -> str:
        return self.sku


def _fully_refunded(order: Any) -> bool:
    """The condition of PAID -> REFUNDED (``refunded_amount`` was read back first: it is
    only ever raised by a conditional UPDATE)."""
    return bool(order.refunded_amount == order.amount)


def _not_fully_refunded(order: Any) -> bool:
    """The condition of REFUNDED -> PAID: a refund reversed, so not all of it is back."""
    return bool(order.refunded_amount < order.amount)


class Order(models.Model):
    """An order and its state machine: UNPAID -> PAID -> REFUNDED, UNPAID -> CANCELLED.

    The transitions are declared here, for the admin and the diagram of
    /how-it-works/, and the status is protected: no code assigns it. Each move
    happens as a conditional UPDATE written out where the order moves, its row
    count checked: ``Order.objects.filter(pk=..., status=<source>).update(status=
    <target>)``. Of two writers moving the same order, the second matches no
    row and changes nothing. The instance a service locked keeps the status it
    read unless the service reads it again (``order_cancel`` does: it returns
    the order). The moves: UNPAID -> PAID in
    ``payments.services.payment_settle``, UNPAID -> CANCELLED in
    ``orders.services.order_cancel``, PAID -> REFUNDED in
    ``payments.refunds.refund_settle``, and back REFUNDED -> PAID when a refund
    reverses (the provider could not pay it out) in ``payments.reversals``.
    """

    class Status(models.TextChoices):
        UNPAID = "UNPAID"
        PAID = "PAID"
        CANCELLED = "CANCELLED"
        REFUNDED = "REFUNDED"  # every minor unit of the capture went back to the payer

    number = models.CharField(max_length=32, unique=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="orders"
    )
    status = FSMField(max_length=16, choices=Status.choices, default=Status.UNPAID, protected=True)
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    # The Idempotency-Key that created the order. Unique per user: even with the
    # key layer off (or its record reaped), one key can never make two orders.
    # NULL (not ""), so orders made without a key never collide on the index.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(auto_now_add=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    # What successful refunds gave back so far. Changed only by one conditional
    # UPDATE (``refunded_amount + x <= amount``, payments' refund_settle), and the
    # database refuses more than the amount even if a bug tried.
    refunded_amount = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "idempotency_key"], name="order_one_per_user_key"
            ),
            models.CheckConstraint(
                condition=Q(refunded_amount__lte=F("amount")),
                name="order_refunds_never_exceed_amount",
            ),
        ]

    def __str__(self) -> str:
        return self.number

    def refresh_from_db(
        self,
        using: str | None = None,
        fields: Iterable[str] | None = None,
        from_queryset: models.QuerySet[Order] | None = None,
    ) -> None:
        """Django's refresh, for a protected status: the field refuses to overwrite a
        status the instance holds, so the instance lets go of it and reads it again,
        with the fields asked for (by default, every field it holds, as Django's)."""
        if fields is None:
            self._prefetched_objects_cache: dict[str, Any] = {}
            fields = [f.attname for f in self._meta.concrete_fields if f.attname in self.__dict__]
        self.__dict__.pop("status", None)
        super().refresh_from_db(
            using=using, fields={*fields, "status"}, from_queryset=from_queryset
        )

    # The declarations of the moves (the admin lists them, /how-it-works/ draws them);
    # the UPDATE of each is where the order moves (see the class). Called on an
    # instance, one moves it in memory only: the services never call them, and
    # never save() an order (a save would not be conditional).
    @transition(field=status, source=Status.UNPAID, target=Status.PAID)
    def mark_paid(self, *, paid_at: datetime) -> None:
        """A settled capture: ``payments.services.payment_settle``."""
        self.paid_at = paid_at

    @transition(field=status, source=Status.UNPAID, target=Status.CANCELLED)
    def cancel(self) -> None:
        """A cancel, or the expiry of an unpaid order: ``orders.services.order_cancel``."""

    @transition(
        field=status,
        source=Status.PAID,
        target=Status.REFUNDED,
        conditions=[_fully_refunded],
    )
    def mark_refunded(self) -> None:
        """Only once the whole amount went back (``payments.refunds``): a partial refund
        leaves the order PAID."""

    @transition(
        field=status,
        source=Status.REFUNDED,
        target=Status.PAID,
        conditions=[_not_fully_refunded],
    )
    def mark_unrefunded(self) -> None:
        """A refund failed after it succeeded (``payments.reversals``): the money is ours
        again, the order PAID."""


class OrderLine(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines")
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="+")
    sku = models.CharField(max_length=64)
    unit_price = models.PositiveBigIntegerField()
    quantity = models.PositiveIntegerField()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["order", "product"], name="order_line_one_per_product"),
            models.CheckConstraint(
                condition=Q(quantity__gt=0), name="order_line_quantity_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.sku}"


class InventoryMovement(models.Model):
    """Every change of a product's stock, so the audit can add them up.

    ``quantity`` is signed: received stock and releases are positive, reservations
    negative. For every product, ``stock == sum(quantity)``.
    """

    class Kind(models.TextChoices):
        RECEIPT = "RECEIPT"
        RESERVE = "RESERVE"
        RELEASE = "RELEASE"

    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="movements")
    order = models.ForeignKey(
        Order, on_delete=models.PROTECT, null=True, blank=True, related_name="movements"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    quantity = models.IntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # One reservation and at most one release per order line: a doubled
            # cancel or expiry cannot give the same stock back twice.
            models.UniqueConstraint(
                fields=["order", "product"],
                condition=Q(kind="RESERVE"),
                name="inventory_one_reserve_per_order_product",
            ),
            models.UniqueConstraint(
                fields=["order", "product"],
                condition=Q(kind="RELEASE"),
                name="inventory_one_release_per_order_product",
            ),
            models.CheckConstraint(
                condition=(
                    Q(kind="RESERVE", quantity__lt=0, order__isnull=False)
                    | Q(kind="RELEASE", quantity__gt=0, order__isnull=False)
                    | Q(kind="RECEIPT", quantity__gt=0)
                ),
                name="inventory_movement_sign_matches_kind",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.quantity:+d} {self.product_id}"


class Shipment(models.Model):
    """The fulfilment of a PAID order: one per order, whatever the queue redelivers."""

    order = models.OneToOneField(Order, on_delete=models.PROTECT, related_name="shipment")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"shipment of {self.order_id}"
