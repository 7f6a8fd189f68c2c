"""A Python client of the OnceShop API that retries the right way.

    from onceshop_client import OnceShopClient, Problem

    shop = OnceShopClient("http://127.0.0.1:8000")
    shop.login("alice", "alice-pays-once")
    order = shop.create_order([{"sku": "TEA-LONGJING", "quantity": 1}]).body
    try:
        paid = shop.pay(order["number"])  # retried with one key until final
    except Problem as final:  # 402 declined, 409 not payable: a new intent needs a new key
        ...

Only ``requests`` is needed: copy this directory into your project, or
install OnceShop (``pip install .``), which ships it. See README.md here.
"""

from onceshop_client.client import (
    KEY_HEADER,
    REPLAYED_HEADER,
    ClientError,
    GaveUp,
    OnceShopClient,
    Problem,
    Reply,
    new_key,
)
from onceshop_client.models import Line, Order, Product, Refund
from onceshop_client.retry import RETRY_SAME_KEY_CODES, RetryPolicy, is_retryable

__all__ = [
    "KEY_HEADER",
    "REPLAYED_HEADER",
    "RETRY_SAME_KEY_CODES",
    "ClientError",
    "GaveUp",
    "Line",
    "OnceShopClient",
    "Order",
    "Problem",
    "Product",
    "Refund",
    "Reply",
    "RetryPolicy",
    "is_retryable",
    "new_key",
]
