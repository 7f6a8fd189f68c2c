"""OnceShop's own code paths, called exactly as its API calls them.

``IdempotentApi.idempotent`` builds a ``KeyRequest`` from the HTTP request and
runs the endpoint's flow through ``idempotency.core.execute``; these do the
same without the HTTP around it, so an experiment compares a naive variant
with the production path, not with a re-implementation of it.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.urls import reverse

from demo.shop.services import order_request_body
from idempotency.core import KeyRequest, Outcome, execute
from orders.flows import order_create_flow
from orders.services import LineRequest
from payments.flows import order_pay_flow
from payments.providers import get_provider


def order_create_once(*, user_id: int, key: str, lines: Sequence[LineRequest]) -> Outcome:
    """``POST /api/v1/orders/`` with ``Idempotency-Key: key``."""
    request = KeyRequest(
        user_id=user_id,
        key=key,
        method="POST",
        path=reverse("order-list"),
        body=order_request_body(lines),
    )
    return execute(request, lambda record: order_create_flow(record, user_id=user_id, lines=lines))


def order_pay_once(*, user_id: int, key: str, number: str) -> Outcome:
    """``POST /api/v1/orders/{number}/pay/`` with ``Idempotency-Key: key``."""
    request = KeyRequest(
        user_id=user_id,
        key=key,
        method="POST",
        path=reverse("order-pay", kwargs={"number": number}),
        body={},
    )
    provider = get_provider()
    return execute(
        request,
        lambda record: order_pay_flow(
            record, user_id=user_id, order_number=number, provider=provider
        ),
    )
