"""7. The wrong key discipline: a new key after a 5xx, the same key after a 4xx.

A 5xx (or a timeout) means "nobody knows yet": the first request may have done
its work. A retry with a NEW key is a new request — here a merchant whose
charge call got a 500 after the provider had charged, and who retried with a
new key (and so a new request): the customer is charged twice. The same key
would have been answered with the first charge.

A 4xx after the action started is final and stored: the same key gets the
same answer forever. A client that retries a declined payment with the SAME
key (after the customer topped up) stays stuck on "declined"; a new intent
with a new key pays.

OnceShop's side is ``onceshop_client``, which does both right by construction.
"""

from __future__ import annotations

import contextlib
import uuid

from django.conf import settings
from django.contrib.auth.models import User
from django.urls import reverse

from demo.sandbox.models import Charge
from demo.sandbox.services.faults import fault_clear, fault_set
from onceshop_client import OnceShopClient, Problem, RetryPolicy
from orders.models import Order
from payments.providers import ProviderOutcomeUnknown, get_provider
from tools.lab.context import Lab
from tools.lab.report import Finding

MISTAKE = "new key after a 5xx, same key after a 4xx"
# Patient enough for the shop's Retry-After: 2 on a 503.
POLICY = RetryPolicy(max_attempts=5, max_elapsed_s=30, base_s=0.1, cap_s=1.0)
STUCK_RETRIES = 3


def _charges(user: User) -> int:
    return Charge.objects.filter(wallet__payer=user.username, status=Charge.Status.SUCCESS).count()


def _client(lab: Lab, user: User) -> OnceShopClient:
    return OnceShopClient(lab.base_url, token=user.auth_token.key, policy=POLICY)


def naive_charge_with_a_new_key_per_attempt(*, payer: str, amount: int) -> int:
    """Charge; on an unknown outcome, try again as a brand-new request. Returns attempts."""
    provider = get_provider()
    for attempt in range(1, 4):
        request_id = str(uuid.uuid4())  # the mistake: a new key for every attempt
        try:
            provider.charge(
                out_trade_no=f"lab-{request_id[:20]}",
                amount=amount,
                currency="CNY",
                payer=payer,
                notify_url=settings.SHOP_BASE_URL + reverse("callback-sandbox"),
                idempotency_key=request_id,
            )
            return attempt
        except ProviderOutcomeUnknown:
            continue
    return attempt


def _new_key_after_5xx(lab: Lab) -> tuple[int, int]:
    naive = lab.customer("5xx-naive")
    fault_set(mode="error_after_commit", count=1, delay_s=0, copies=1)
    naive_charge_with_a_new_key_per_attempt(payer=naive.username, amount=1999)
    naive_charges = _charges(naive)

    ours = lab.customer("5xx-onceshop")
    shop = _client(lab, ours)
    number = shop.create_order([{"sku": lab.product().sku, "quantity": 1}]).body["number"]
    fault_set(mode="error_after_commit", count=1, delay_s=0, copies=1)
    shop.pay(number)  # 503 payment-outcome-unknown, then the same key: paid
    return naive_charges, _charges(ours)


def _pay_after_a_decline(lab: Lab, *, same_key: bool) -> tuple[str, int]:
    user = lab.customer("4xx-same" if same_key else "4xx-new")
    shop = _client(lab, user)
    number = shop.create_order([{"sku": lab.product().sku, "quantity": 1}]).body["number"]
    fault_set(mode="decline", count=1, delay_s=0, copies=1)
    key = str(uuid.uuid4())
    with contextlib.suppress(Problem):  # 402 payment-declined
        shop.pay(number, key=key)
    # The customer tops up, and tries again.
    for _retry in range(STUCK_RETRIES):
        try:
            shop.pay(number, key=key if same_key else None)  # None: a new intent, a new key
            break
        except Problem:
            continue
    return Order.objects.get(number=number).status, _charges(user)


def run(lab: Lab) -> Finding:
    try:
        naive_5xx, ours_5xx = _new_key_after_5xx(lab)
        stuck_status, stuck_charges = _pay_after_a_decline(lab, same_key=True)
        paid_status, paid_charges = _pay_after_a_decline(lab, same_key=False)
    finally:
        fault_clear()
    return Finding(
        number=7,
        mistake=MISTAKE,
        naive=(
            f"new key after a 500: charged {naive_5xx} times; same key after a 402, "
            f"{STUCK_RETRIES} retries: order {stuck_status}, {stuck_charges} charges (stuck)"
        ),
        onceshop=(
            f"the client: same key after the 503: charged {ours_5xx} time; new intent "
            f"after the 402: order {paid_status}, {paid_charges} charge"
        ),
        counts={
            "naive_5xx_charges": naive_5xx,
            "onceshop_5xx_charges": ours_5xx,
            "naive_4xx_paid": int(stuck_status == Order.Status.PAID),
            "onceshop_4xx_paid": int(paid_status == Order.Status.PAID),
            "onceshop_4xx_charges": paid_charges,
        },
        holds={
            "one charge after the 503": ours_5xx == 1,
            "paid with one charge after the 402": (
                paid_status == Order.Status.PAID and paid_charges == 1
            ),
        },
    )
