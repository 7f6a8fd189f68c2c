"""Double clicks on Refund, for real: threads with their own connections, the sandbox over HTTP."""

from collections import Counter

import pytest

from demo.sandbox.models import Refund as ProviderRefund
from fastpaths.unkeyed import LAYER_OFF
from payments.models import LedgerEntry, Refund
from tests.assertions import assert_refunded_once
from tests.concurrency.helpers import run_at_once
from tests.conftest import client_for, new_key
from tests.payments.test_pay_late_outcomes import refund_declined_now_done_later

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def refund_from_thread(user, order, key: str, body: dict[str, int]) -> tuple[int, str]:
    response = client_for(user).post(
        f"/api/v1/orders/{order.number}/refunds/",
        body,
        format="json",
        headers={"Idempotency-Key": key},
    )
    return response.status_code, response.json().get("code", "")


def test_30_identical_refunds_at_once_refund_once(paid_order, user, wallet):
    key = new_key()

    answers = run_at_once(30, lambda _i: refund_from_thread(user, paid_order, key, {}))

    statuses = Counter(status for status, _ in answers)
    assert set(statuses) <= {200, 409}, answers
    assert statuses[200] >= 1
    assert {code for status, code in answers if status == 409} <= {"idempotency-key-in-use"}
    assert Refund.objects.count() == 1
    assert LedgerEntry.objects.filter(kind="refund").count() == 1
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


def test_10_refunds_with_different_keys_racing_never_exceed_the_capture(paid_order, user, wallet):
    # Each asks for 40 % of the order: at most two can fit, and never a third.
    part = paid_order.amount * 2 // 5

    answers = run_at_once(
        10, lambda _i: refund_from_thread(user, paid_order, new_key(), {"amount": part})
    )

    refunded = Counter(status for status, _ in answers)[200] * part
    assert 1 <= refunded // part <= 2, answers
    assert {code for status, code in answers if status != 200} <= {
        "order-not-refundable",
        "refund-exceeds-paid",
    }
    assert_refunded_once(paid_order, user, wallet, refunded=refunded)
    assert refunded <= paid_order.amount


def test_then_the_rest_is_refunded_and_a_further_refund_is_refused(paid_order, user, wallet):
    run_at_once(10, lambda _i: refund_from_thread(user, paid_order, new_key(), {"amount": 1000}))

    rest = refund_from_thread(user, paid_order, new_key(), {})
    more = refund_from_thread(user, paid_order, new_key(), {"amount": 1})

    assert rest[0] == 200
    assert more == (409, "order-not-refundable")
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


def test_without_the_key_layer_concurrent_refunds_still_refund_at_most_the_capture(
    settings, paid_order, user, wallet
):
    # Layer 1 off: the same request 10 times at once runs 10 times. The one-refund-
    # in-flight index, the state machine and the conditional refunded_amount update
    # (under its CHECK) still let the order's capture come back once, never more.
    for name, value in LAYER_OFF.items():  # IDEMPOTENCY_ENABLED=false
        setattr(settings, name, value)
    key = new_key()

    answers = run_at_once(10, lambda _i: refund_from_thread(user, paid_order, key, {}))

    assert Counter(status for status, _ in answers)[200] == 1, answers
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)


@pytest.mark.parametrize("keys", ["same", "different"])
def test_double_clicks_after_a_declined_refund_carried_out_later_book_it_once(
    keys, paid_order, user, wallet, refund, fault
):
    # Given a refund of a third of the order, declined now and carried out later at the
    # provider, which the shop has not heard of
    third = paid_order.amount // 3
    late = refund_declined_now_done_later(refund, fault, amount=third)

    # When the customer double-clicks a refund of the rest: both requests ask the
    # provider about the declined one at once, with one key or with two
    shared = new_key()
    answers = run_at_once(
        2,
        lambda _i: refund_from_thread(
            user, paid_order, shared if keys == "same" else new_key(), {}
        ),
    )

    # Then the late refund is booked once, and one new refund (of what was left then)
    # went to the provider: the order is refunded whole, once
    statuses = Counter(status for status, _ in answers)
    assert statuses[200] >= 1, answers
    assert {code for status, code in answers if status != 200} <= {
        "idempotency-key-in-use",
        "order-not-refundable",
    }
    assert Refund.objects.get(pk=late.pk).status == "SUCCEEDED"
    assert LedgerEntry.objects.filter(refund_attempt=late).count() == 1
    at_provider = ProviderRefund.objects.filter(status="SUCCESS").values_list("amount", flat=True)
    assert sorted(at_provider) == sorted([third, paid_order.amount - third])
    assert Refund.objects.filter(status="SUCCEEDED").count() == 2
    assert_refunded_once(paid_order, user, wallet, refunded=paid_order.amount)
