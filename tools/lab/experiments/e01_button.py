"""1. Guarding only with a disabled button.

The button greys out after the first click, in the browser. A second submit of
the same form — a double click faster than the script, a browser resending the
POST, a script calling the endpoint — never meets the button. Here it goes
straight to the endpoint both times.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from demo.shop.services import checkout_submit, checkout_token_issue
from orders.services import LineRequest, order_create
from tools.lab.context import Lab
from tools.lab.report import Finding

MISTAKE = "guarding only with a disabled button"


def naive_checkout(*, user_id: int, lines: Sequence[LineRequest]) -> None:
    """The naive endpoint: the button is the only guard, so every submit orders."""
    order_create(user_id=user_id, lines=lines, idempotency_key=None)


def run(lab: Lab) -> Finding:
    product = lab.product()
    lines = lab.one(product)

    naive = lab.customer("button-naive")
    for _submit in range(2):  # the form, submitted twice
        naive_checkout(user_id=naive.pk, lines=lines)

    # OnceShop's checkout: the form carries a one-time token that is the order's key.
    ours = lab.customer("button-onceshop")
    session = secrets.token_hex(16)
    token = checkout_token_issue(session_key=session, user_id=ours.pk)
    answers = [
        checkout_submit(user_id=ours.pk, session_key=session, token=token, lines=lines)
        for _submit in range(2)
    ]

    naive_orders = lab.orders_of(naive)
    our_orders = lab.orders_of(ours)
    replayed = sum(answer.replayed for answer in answers)
    return Finding(
        number=1,
        mistake=MISTAKE,
        naive=f"2 submits of one form: {naive_orders} orders",
        onceshop=(
            f"2 submits of one form: {our_orders} order; the second got the first's "
            f"answer ({replayed} replayed)"
        ),
        counts={
            "naive_orders": naive_orders,
            "onceshop_orders": our_orders,
            "onceshop_replayed": replayed,
        },
        holds={"one order for two submits": our_orders == 1, "the second replayed": replayed == 1},
    )
