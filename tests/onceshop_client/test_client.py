"""The client against the live app: retries that end in one order and one charge.

The shop runs in pytest-django's live server and pays through the real sandbox
over HTTP; a counting ``requests.Session`` records what went on the wire.
"""

import random
import threading
from typing import Any

import pytest
import requests

from idempotency.models import IdempotencyKey
from onceshop_client import GaveUp, OnceShopClient, Problem, RetryPolicy, new_key
from orders.models import Order
from tests.assertions import assert_paid_once, assert_refunded_once
from tests.onceshop_client.proxy import DroppingProxy

pytestmark = pytest.mark.django_db(transaction=True)

# Short waits: the tests care which requests are sent, not how long apart.
FAST = RetryPolicy(max_attempts=6, max_elapsed_s=30, base_s=0.05, cap_s=0.5)


class CountingSession(requests.Session):
    """Every request the client puts on the wire, with its Idempotency-Key."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str | None] = []

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> Any:
        self.sent.append((kwargs.get("headers") or {}).get("Idempotency-Key"))
        return super().request(method, url, *args, **kwargs)


@pytest.fixture
def wire() -> CountingSession:
    return CountingSession()


@pytest.fixture
def shop(sandbox, live_server, user, wire) -> OnceShopClient:
    return OnceShopClient(
        live_server.url,
        token=user.auth_token.key,
        policy=FAST,
        rng=random.Random(15),
        session=wire,
    )


@pytest.fixture
def number(shop, product) -> str:
    return shop.create_order([{"sku": product.sku, "quantity": 1}]).body["number"]


def test_login_products_and_an_order_round_trip(sandbox, live_server, user, product):
    shop = OnceShopClient(live_server.url, policy=FAST)
    shop.login(user.username, "correct-horse-battery")

    assert product.sku in {p["sku"] for p in shop.products()}
    created = shop.create_order([{"sku": product.sku, "quantity": 2}])
    assert (created.status, created.replayed, created.attempts) == (201, False, 1)
    assert shop.order(created.body["number"]).body["amount"] == 2 * product.price
    assert [order["number"] for order in shop.orders()] == [created.body["number"]]
    cancelled = shop.cancel(created.body["number"])
    assert cancelled.body["status"] == "CANCELLED"


def test_one_key_per_intent_and_a_replay_is_exposed(shop, product, user):
    key = new_key()
    first = shop.create_order([{"sku": product.sku, "quantity": 1}], key=key)
    again = shop.create_order([{"sku": product.sku, "quantity": 1}], key=key)

    assert (first.replayed, again.replayed) == (False, True)
    assert again.body == first.body
    other = shop.create_order([{"sku": product.sku, "quantity": 1}])  # a new intent
    assert other.key not in (None, key)
    assert Order.objects.filter(user=user).count() == 2


@pytest.mark.parametrize(
    ("mode", "options"),
    [("error_after_commit", {}), ("timeout_after_commit", {"delay_s": 3.0})],
)
def test_a_503_after_the_provider_charged_is_retried_with_the_same_key(
    shop, number, fault, wire, user, wallet, mode, options
):
    fault(mode, **options)
    waits: list[tuple[int, float, int | None]] = []
    shop.on_retry = lambda attempt, delay, reply: waits.append(
        (attempt, delay, reply.status if reply else None)
    )

    paid = shop.pay(number)

    assert paid.status == 200
    assert paid.body["status"] == "PAID"
    assert paid.attempts == 2  # 503 payment-outcome-unknown, then the resumed pay
    assert waits == [(1, 2.0, 503)]  # Retry-After: 2 beats the policy's shorter backoff
    pay_keys = wire.sent[1:]  # after the order's creation
    assert pay_keys == [paid.key, paid.key]
    assert Order.objects.filter(user=user).count() == 1
    assert_paid_once(Order.objects.get(number=number), user, wallet)


def test_a_409_in_use_is_retried_and_gets_the_first_requests_answer(
    shop, number, fault, live_server, user, wallet
):
    # The first pay is slow at the provider (but within the shop's timeout).
    fault("timeout_after_commit", delay_s=1.5)
    key = new_key()
    first: dict[str, Any] = {}
    slow = OnceShopClient(live_server.url, token=user.auth_token.key, policy=FAST)
    thread = threading.Thread(target=lambda: first.update(reply=slow.pay(number, key=key)))
    thread.start()
    try:
        # Await the first request's record: from now on the key is in use.
        while not IdempotencyKey.objects.filter(key=key).exists():
            thread.join(0.01)
        second = shop.pay(number, key=key)
    finally:
        thread.join()

    assert second.attempts >= 2  # at least one 409 idempotency-key-in-use, then the replay
    assert second.replayed
    assert second.body == first["reply"].body
    assert_paid_once(Order.objects.get(number=number), user, wallet)


def test_a_read_timeout_is_retried_with_the_same_key_and_ends_with_one_charge(
    number, fault, live_server, user, wallet
):
    # The shop takes 1.5 s to answer (a slow provider); the client waits 0.5 s.
    fault("timeout_after_commit", delay_s=1.5)
    impatient = OnceShopClient(
        live_server.url, token=user.auth_token.key, policy=FAST, timeout=(3.0, 0.5)
    )

    paid = impatient.pay(number)

    # Timed out; then 409 in use while the first still ran, and its answer.
    assert paid.attempts >= 2
    assert_paid_once(Order.objects.get(number=number), user, wallet)


def test_a_402_is_final_not_retried(shop, number, fault, wire, user, wallet):
    fault("decline")

    with pytest.raises(Problem) as declined:
        shop.pay(number)

    assert (declined.value.status, declined.value.code) == (402, "payment-declined")
    assert declined.value.reply.attempts == 1
    assert len(wire.sent) == 2  # the order, and one pay
    # A new intent (a new key) pays.
    assert shop.pay(number).body["status"] == "PAID"
    assert_paid_once(Order.objects.get(number=number), user, wallet)


def test_a_refund_in_two_parts_ends_refunded_with_each_part_back_once(shop, number, user, wallet):
    amount = shop.pay(number).body["amount"]

    part = shop.refund(number, amount=1, reason="one missing")
    rest = shop.refund(number)  # no amount: the whole refundable rest

    assert (part.body["status"], part.body["refunded_amount"]) == ("PAID", 1)
    assert (rest.body["status"], rest.body["refunded_amount"]) == ("REFUNDED", amount)
    assert [r["reason"] for r in rest.body["refunds"]] == ["one missing", ""]
    assert part.key != rest.key  # two intents, two keys
    assert_refunded_once(Order.objects.get(number=number), user, wallet, refunded=amount)


def test_a_503_refund_outcome_unknown_is_retried_with_the_same_key_and_refunds_once(
    shop, number, fault, wire, user, wallet
):
    amount = shop.pay(number).body["amount"]
    fault("error_after_commit", target="refund")  # refunded, then a 500 to the shop

    refunded = shop.refund(number)

    assert (refunded.status, refunded.attempts) == (200, 2)
    assert wire.sent[2:] == [refunded.key, refunded.key]  # after the order and its pay
    assert_refunded_once(Order.objects.get(number=number), user, wallet, refunded=amount)


def test_a_402_refund_declined_is_final_not_retried(shop, number, fault, wire, user, wallet):
    shop.pay(number)
    fault("decline", target="refund")

    with pytest.raises(Problem) as declined:
        shop.refund(number)

    assert (declined.value.status, declined.value.code) == (402, "refund-declined")
    assert len(wire.sent) == 3  # the order, the pay and one refund
    assert_refunded_once(Order.objects.get(number=number), user, wallet, refunded=0)


def test_a_409_order_not_payable_is_final_not_retried(shop, number, wire):
    shop.pay(number)

    with pytest.raises(Problem) as not_payable:
        shop.pay(number)  # a new intent on a paid order

    assert (not_payable.value.status, not_payable.value.code) == (409, "order-not-payable")
    assert not not_payable.value.replayed
    assert len(wire.sent) == 3


def test_a_422_mismatch_is_final_not_retried(shop, product, wire, user):
    key = new_key()
    shop.create_order([{"sku": product.sku, "quantity": 1}], key=key)

    with pytest.raises(Problem) as mismatch:
        shop.create_order([{"sku": product.sku, "quantity": 2}], key=key)

    assert (mismatch.value.status, mismatch.value.code) == (422, "idempotency-key-mismatch")
    assert len(wire.sent) == 2
    assert Order.objects.filter(user=user).count() == 1


def test_a_connection_killed_before_the_answer_still_ends_with_one_order(
    sandbox, live_server, user, product
):
    with DroppingProxy(live_server.url, drops=1) as proxy:
        shop = OnceShopClient(proxy.url, token=user.auth_token.key, policy=FAST)

        created = shop.create_order([{"sku": product.sku, "quantity": 1}])

    assert proxy.dropped == 1  # the first answer was lost on the way back
    assert created.status == 201
    assert created.attempts == 2
    assert created.replayed  # the server had made the order: the retry got its answer
    assert Order.objects.filter(user=user).count() == 1
    assert IdempotencyKey.objects.filter(user=user).count() == 1


def test_the_budget_ends_in_gave_up_with_the_key_to_come_back_with(user):
    closed = socket_nobody_listens_on()
    shop = OnceShopClient(closed, token="t", policy=RetryPolicy(max_attempts=3, base_s=0.01))

    with pytest.raises(GaveUp) as gave_up:
        shop.pay("20260101-X", key="intent-1")

    assert gave_up.value.attempts == 3
    assert gave_up.value.key == "intent-1"
    assert isinstance(gave_up.value.last_error, requests.ConnectionError)


def socket_nobody_listens_on() -> str:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
