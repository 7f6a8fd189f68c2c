"""Errors of the catalogue and of orders (codes are part of the public contract)."""

from django.utils.translation import gettext_noop

from edge.errors import ApplicationError


class OutOfStock(ApplicationError):
    """A line could not be reserved; nothing of the order was reserved."""

    status = 409
    code = "out-of-stock"
    title = gettext_noop("Out of stock")
    default_detail = "Not enough stock for one of the lines; nothing was reserved."
    final = True


class UnknownSku(ApplicationError):
    """A line names a product that does not exist. Bad input: nothing is stored."""

    code = "unknown-sku"
    title = gettext_noop("Unknown SKU")
    default_detail = "One or more lines name a product that does not exist."


class MixedCurrencies(ApplicationError):
    """An order is paid in one currency; its products must share it."""

    code = "mixed-currencies"
    title = gettext_noop("Mixed currencies")
    default_detail = "All products of one order must be priced in the same currency."


class OrderAmountOutOfRange(ApplicationError):
    """The order's total is one no provider charge can carry: 0, or above
    ``ORDER_MAX_AMOUNT``. Bad input: refused before anything is stored."""

    code = "order-amount-out-of-range"
    title = gettext_noop("Order amount out of range")
    default_detail = "The order's total must be between min_amount and max_amount."


class OrderKeyReused(ApplicationError):
    """The key already created an order whose idempotency record has been reaped.

    Inside the retention window this never happens (the record replays). After
    it, the unique (user, key) index on orders still refuses a second order.
    """

    status = 409
    code = "idempotency-key-reused"
    title = gettext_noop("Idempotency-Key already used")
    default_detail = (
        "This Idempotency-Key already created an order and its record has expired; "
        "use a new key for a new order."
    )
    final = True


class SkuExists(ApplicationError):
    """A product with this SKU exists already."""

    status = 409
    code = "sku-exists"
    title = gettext_noop("SKU exists")
    default_detail = "A product with this SKU exists already."


class OrderNotCancellable(ApplicationError):
    """Only an UNPAID order without a live payment attempt can be cancelled."""

    status = 409
    code = "order-not-cancellable"
    title = gettext_noop("Order not cancellable")
    default_detail = "Only an unpaid order without a payment in progress can be cancelled."
    final = True


class TooManyOpenOrders(ApplicationError):
    """The user already holds MAX_OPEN_ORDERS_PER_USER unpaid orders.

    Not final: nothing is stored under the key, so the same request succeeds once an
    order is paid, cancelled or expired.
    """

    status = 409
    code = "too-many-open-orders"
    title = gettext_noop("Too many open orders")
    default_detail = "Pay, cancel or wait out one of your unpaid orders first."
