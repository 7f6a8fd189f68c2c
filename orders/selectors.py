"""Reads of the catalogue and of orders."""

from django.db.models import QuerySet
from django.http import Http404
from django.shortcuts import get_object_or_404

from edge.bounds import fits_column
from orders.models import Order, Product


def product_list() -> QuerySet[Product]:
    return Product.objects.all()


def order_list(*, user_id: int) -> QuerySet[Order]:
    return Order.objects.filter(user_id=user_id).prefetch_related("lines", "payments", "refunds")


def order_get(*, user_id: int, number: str) -> Order:
    """The caller's own order; someone else's is a 404, exactly like a missing one.

    So is a number no row can hold (a NUL, say, from ``%00`` in the URL): it names
    nothing, and PostgreSQL would refuse to even compare it.
    """
    if not fits_column(Order, "number", number):
        raise Http404
    return get_object_or_404(order_list(user_id=user_id), number=number)
