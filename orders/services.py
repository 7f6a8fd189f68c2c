"""Writes of the catalogue and of orders: one function per business action."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from orders.errors import (
    MixedCurrencies,
    OrderAmountOutOfRange,
    OrderKeyReused,
    OrderNotCancellable,
    OutOfStock,
    SkuExists,
    TooManyOpenOrders,
    UnknownSku,
)
from orders.locks import lock_order
from orders.models import InventoryMovement, Order, OrderLine, Product, Shipment

# One minor unit (a fen, a cent): no provider charges 0.
MIN_ORDER_AMOUNT = 1


@dataclass(frozen=True)
class LineRequest:
    sku: str
    quantity: int


def product_create(*, sku: str, name: str, price: int, currency: str, stock: int) -> Product:
    """Add a product and record its initial stock as received."""
    try:
        with transaction.atomic():
            product = Product.objects.create(
                sku=sku, name=name, price=price, currency=currency, stock=stock
            )
            if stock:
                InventoryMovement.objects.create(
                    product=product, kind=InventoryMovement.Kind.RECEIPT, quantity=stock
                )
    except IntegrityError as error:
        if violated_constraint(error) == "product_sku_unique":
            raise SkuExists() from error
        raise
    return product


def _new_order_number() -> str:
    # Date for humans, 40 random bits against collisions (the column is unique anyway).
    return f"{timezone.now():%Y%m%d}-{secrets.token_hex(5).upper()}"


def violated_constraint(error: IntegrityError) -> str | None:
    """The name of the constraint an IntegrityError reports (PostgreSQL's diagnostics)."""
    diag = getattr(error.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None)


def order_products_lock(*, order_ids: Collection[int]) -> None:
    """Lock the product rows of these orders' lines, in the one global order: by id.

    Every writer of product rows takes their locks in ascending id: creation
    reserves its products sorted by id, and whatever gives stock back (a cancel,
    a batch of expiries) locks all the rows it will touch, by id, before its
    first UPDATE. Two writers can then never each hold a row the other waits
    for: without it, an expiry batch releasing order after order would lock a
    higher id before a lower one and deadlock with a creation of both.
    """
    # FOR NO KEY UPDATE, the lock the stock UPDATEs take anyway: it does not block
    # the foreign-key checks of new order lines (FOR KEY SHARE). PostgreSQL sorts
    # before it locks, so the rows are locked in id order.
    lines = OrderLine.objects.filter(order_id__in=order_ids).values("product_id")
    list(
        Product.objects.select_for_update(no_key=True)
        .filter(pk__in=lines)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def _reserve(*, product: Product, quantity: int) -> None:
    """Take ``quantity`` from stock, or raise OutOfStock. Never read-modify-write.

    The condition ``stock >= quantity`` is evaluated by PostgreSQL under the row
    lock the UPDATE takes, so two orders racing for the last item cannot both win.
    """
    taken = Product.objects.filter(pk=product.pk, stock__gte=quantity).update(
        stock=F("stock") - quantity
    )
    if not taken:
        raise OutOfStock(
            f"Not enough stock for {product.sku}; nothing was reserved.", sku=product.sku
        )


# The first key of the advisory locks taken per user for order creation; the
# second is the user's id (auth_user.id is a 32-bit integer).
_OPEN_ORDERS_LOCK = 0x0E0D


def _check_open_orders(*, user_id: int) -> None:
    """Refuse a new order past MAX_OPEN_ORDERS_PER_USER unpaid ones, race-free.

    A count alone would let N concurrent requests all see N-1 orders and all insert.
    The user's advisory lock, held until this transaction ends, makes every creation
    of this user's orders count after the previous one committed (READ COMMITTED: the
    count, a new statement, sees it). Taken before any product row lock, always in the
    same order, so it cannot deadlock with them; other users never wait on it.
    """
    cap = settings.MAX_OPEN_ORDERS_PER_USER
    if cap <= 0:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_OPEN_ORDERS_LOCK, user_id])
    if Order.objects.filter(user_id=user_id, status=Order.Status.UNPAID).count() >= cap:
        raise TooManyOpenOrders()


def order_create(
    *, user_id: int, lines: Sequence[LineRequest], idempotency_key: str | None
) -> Order:
    """Create an UNPAID order at current prices and reserve its stock, all or nothing."""
    quantities = {line.sku: line.quantity for line in lines}
    products = list(Product.objects.filter(sku__in=quantities))
    if missing := sorted(set(quantities) - {product.sku for product in products}):
        raise UnknownSku(skus=missing)
    if len({product.currency for product in products}) > 1:
        raise MixedCurrencies()
    amount = sum(product.price * quantities[product.sku] for product in products)
    # The smallest charge is one minor unit; an order nobody can pay is refused now
    # (400, nothing stored), not after its stock sat reserved until it expired.
    if not MIN_ORDER_AMOUNT <= amount <= settings.ORDER_MAX_AMOUNT:
        raise OrderAmountOutOfRange(
            f"The order's total, {amount}, must be between {MIN_ORDER_AMOUNT} and "
            f"{settings.ORDER_MAX_AMOUNT} minor units; nothing was reserved.",
            amount=amount,
            min_amount=MIN_ORDER_AMOUNT,
            max_amount=settings.ORDER_MAX_AMOUNT,
        )
    # Lock rows in the one global order (by id, see order_products_lock): the
    # reservations below take the product locks in this order.
    products.sort(key=lambda product: product.pk)

    try:
        with transaction.atomic():
            _check_open_orders(user_id=user_id)
            order = Order.objects.create(
                number=_new_order_number(),
                user_id=user_id,
                idempotency_key=idempotency_key,
                amount=amount,
                currency=products[0].currency,
            )
            order_lines = OrderLine.objects.bulk_create(
                OrderLine(
                    order=order,
                    product=product,
                    sku=product.sku,
                    unit_price=product.price,
                    quantity=quantities[product.sku],
                )
                for product in products
            )
            InventoryMovement.objects.bulk_create(
                InventoryMovement(
                    product=product,
                    order=order,
                    kind=InventoryMovement.Kind.RESERVE,
                    quantity=-quantities[product.sku],
                )
                for product in products
            )
            # Stock last: from the first reservation until COMMIT the product rows
            # stay locked, and every order of a popular product waits on them. The
            # fewer statements after this point, the shorter everyone waits.
            for product in products:
                _reserve(product=product, quantity=quantities[product.sku])
    except IntegrityError as error:
        if violated_constraint(error) != "order_one_per_user_key":
            raise
        existing = Order.objects.get(user_id=user_id, idempotency_key=idempotency_key)
        raise OrderKeyReused(order=existing.number) from error
    # Hand the rows we just wrote to whoever renders the order (the answer is
    # built inside the transaction, under the stock locks): reading them back
    # would cost two queries, and a new order has no payments.
    order._prefetched_objects_cache = {"lines": order_lines, "payments": [], "refunds": []}
    return order


# A rule of a layer above orders (payments: "not while an attempt is live"), asked
# under the order's row lock: why this order cannot be cancelled now, or None.
CancelBlocker = Callable[[Order], str | None]


def order_cancel(*, order: Order, blocker: CancelBlocker) -> Order:
    """UNPAID -> CANCELLED and give its stock back, exactly once.

    Orders know nothing of the layers above them (docs/architecture.md), so
    whoever cancels passes their rules in: ``blocker`` runs under the order's
    row lock, and any reason it names refuses the cancel (``OrderNotCancellable``).
    Every caller passes ``payments.services.order_cancel_blocker``.
    """
    with transaction.atomic():
        # The order first, as every writer of it (orders.locks; payment_create and
        # each settlement too): whichever comes second sees the other's committed
        # result (a live attempt, a paid or a cancelled order).
        order = lock_order(order_id=order.pk)
        if order.status != Order.Status.UNPAID:
            raise OrderNotCancellable(f"The order is {order.status.lower()}.")
        if reason := blocker(order):
            raise OrderNotCancellable(reason)
        # UNPAID -> CANCELLED, conditional on the status read under the lock.
        cancelled = Order.objects.filter(pk=order.pk, status=Order.Status.UNPAID).update(
            status=Order.Status.CANCELLED
        )
        if cancelled != 1:
            raise OrderNotCancellable("The order changed while it was being cancelled.")
        order.refresh_from_db(fields=["status"])
        order_products_lock(order_ids=[order.pk])
        lines = list(order.lines.all())
        for line in lines:
            Product.objects.filter(pk=line.product_id).update(stock=F("stock") + line.quantity)
        # One release per order line by unique index: a doubled cancel (or an expiry
        # racing a cancel) cannot give the same stock back twice.
        InventoryMovement.objects.bulk_create(
            InventoryMovement(
                product_id=line.product_id,
                order=order,
                kind=InventoryMovement.Kind.RELEASE,
                quantity=line.quantity,
            )
            for line in lines
        )
    return order


def shipment_create(*, order_id: int) -> Shipment | None:
    """Ship a PAID order once. Safe to run any number of times (at-least-once tasks).

    The unique order column is the dedupe: a redelivered or doubled task inserts
    nothing (ON CONFLICT DO NOTHING) and returns the shipment the first one made.
    """
    # PAID is left only for REFUNDED, and a refunded order may have shipped before
    # its refund (the audit allows it): a read gone stale before the insert is harmless.
    if not Order.objects.filter(pk=order_id, status=Order.Status.PAID).exists():
        return None  # not paid (or gone): nothing to ship, and nothing to retry
    Shipment.objects.bulk_create([Shipment(order_id=order_id)], ignore_conflicts=True)
    return Shipment.objects.get(order_id=order_id)
