"""5. A one-time token consumed with GET, then DEL.

The checkout form carries a token; the submit checks it exists (GET), makes
the order, and deletes the token (DEL) once the order is made (so that a
submit that failed can be sent again). Every submit that arrives between the
first submit's GET and its DEL also finds the token, and passes. OnceShop takes it
with one atomic GETDEL (in a Lua script that also leaves a receipt), so exactly
one submit takes it, and the token is the order's Idempotency-Key anyway.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from demo.shop.services import checkout_submit, checkout_token_issue
from edge.redis import redis_client
from orders.services import LineRequest, order_create
from tools.lab.context import Lab, at_once
from tools.lab.report import Finding

MISTAKE = "token consumed with GET then DEL"


def naive_checkout(*, token_key: str, user_id: int, lines: Sequence[LineRequest]) -> bool:
    """Check the token, order, then delete the token: a GET and a DEL, work between."""
    redis = redis_client()
    owner = redis.get(token_key)
    if owner is None or owner != str(user_id).encode():
        return False  # "this form was already submitted"
    order_create(user_id=user_id, lines=lines, idempotency_key=None)
    redis.delete(token_key)
    return True


def run(lab: Lab) -> Finding:
    submits = lab.scale.token_submits
    lines = lab.one(lab.product())

    naive = lab.customer("token-naive")
    token_key = f"lab:checkout-token:{secrets.token_urlsafe(32)}"
    redis_client().set(token_key, str(naive.pk), ex=600)

    try:
        at_once(
            submits,
            lambda _i: naive_checkout(token_key=token_key, user_id=naive.pk, lines=lines),
        )
    finally:
        redis_client().delete(token_key)

    ours = lab.customer("token-onceshop")
    session = secrets.token_hex(16)
    token = checkout_token_issue(session_key=session, user_id=ours.pk)
    at_once(
        submits,
        lambda _i: checkout_submit(user_id=ours.pk, session_key=session, token=token, lines=lines),
    )
    naive_orders = lab.orders_of(naive)
    our_orders = lab.orders_of(ours)
    return Finding(
        number=5,
        mistake=MISTAKE,
        naive=f"{submits} submits of one token at once: {naive_orders} passed (orders)",
        onceshop=f"GETDEL: {our_orders} passed (order); the rest got its answer",
        counts={"submits": submits, "naive_orders": naive_orders, "onceshop_orders": our_orders},
        holds={"one order for one token": our_orders == 1},
    )
