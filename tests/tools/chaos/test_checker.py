"""The history checker: a run where the books agree passes; each kind of lie is caught.

The books and histories are built by hand (the checker reads plain data), so
every rule is shown to fire on exactly the lie it is about.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tools.chaos.books import AttemptBook, Books, CaseBook, KeyBook, OrderBook
from tools.chaos.checker import Violation, check, operation
from tools.chaos.history import History, history_read

ALICE = "alice"
ORDER = "20261201-AAAA"
CREATE_KEY = "k-create"
PAY_KEY = "k-pay"
AMOUNT = 500


def request(key: str | None, path: str, status: int | None, **fields: Any) -> dict[str, Any]:
    event = {"type": "request", "customer": ALICE, "method": "POST", "path": path, "key": key}
    if status is None:
        return {**event, "error": "ConnectionError"}
    # Every 503 the shop sends says when to come back, as Balancer records it.
    retry_after = fields.pop("retry_after", "2" if status == 503 else "")
    return {
        **event,
        "status": status,
        "code": fields.pop("code", ""),
        "retry_after": retry_after,
        **fields,
    }


def intent(op: str, key: str, outcome: str, status: int | None, **fields: Any) -> dict[str, Any]:
    return {
        "type": "intent",
        "customer": ALICE,
        "op": op,
        "key": key,
        "outcome": outcome,
        "status": status,
        "order": fields.pop("order", ORDER),
        **fields,
    }


PAY_PATH = f"/api/v1/orders/{ORDER}/pay/"


def good_history() -> list[dict[str, Any]]:
    """Alice creates an order (the first try cut off), pays it (503, then 200)."""
    return [
        request(CREATE_KEY, "/api/v1/orders/", None),
        request(CREATE_KEY, "/api/v1/orders/", 201, number=ORDER),
        intent("create", CREATE_KEY, "ok", 201, order=None, number=ORDER, amount=AMOUNT),
        request(PAY_KEY, PAY_PATH, 503, code="payment-outcome-unknown"),
        request(PAY_KEY, PAY_PATH, 200, number=ORDER),
        intent("pay", PAY_KEY, "ok", 200, number=ORDER, order_status="PAID"),
    ]


def good_books() -> Books:
    return Books(
        orders={
            ORDER: OrderBook(
                number=ORDER,
                user=ALICE,
                status="PAID",
                amount=AMOUNT,
                refunded_amount=0,
                create_key=CREATE_KEY,
                captures=(AMOUNT,),
                shipments=1,
                lines=(("TEA", 2),),
            )
        },
        attempts={
            "P1": AttemptBook(
                out_trade_no="P1",
                order=ORDER,
                status="SUCCEEDED",
                provider_status="SUCCESS",
                provider_net=AMOUNT,
                late_success=False,
            )
        },
        keys={
            (ALICE, CREATE_KEY): KeyBook(True, 201, order=ORDER, attempt=None),
            (ALICE, PAY_KEY): KeyBook(True, 200, order=ORDER, attempt="P1"),
        },
        wallets={ALICE: (AMOUNT, 0)},
        ledger_net={ALICE: AMOUNT},
        products={"TEA": (98, 100)},
    )


def rules(violations: list[Violation]) -> list[str]:
    return [violation.rule for violation in violations]


def test_a_run_where_the_books_agree_passes():
    assert check(good_history(), good_books()) == []


def test_an_order_the_customer_was_told_about_but_the_books_lack_is_flagged():
    books = replace(good_books(), orders={})

    assert "told 201" in rules(check(good_history(), books))


def test_two_orders_made_by_one_create_key_are_flagged():
    books = good_books()
    twin = replace(books.orders[ORDER], number="20261201-BBBB", status="CANCELLED", shipments=0)
    books = replace(books, orders={**books.orders, twin.number: twin})

    assert "one order per key" in rules(check(good_history(), books))


def test_told_paid_but_unpaid_in_the_books_is_flagged():
    books = good_books()
    unpaid = replace(books.orders[ORDER], status="UNPAID", captures=(), shipments=0)

    violations = check(good_history(), replace(books, orders={ORDER: unpaid}))

    assert "told PAID" in rules(violations)
    # The evidence is what the customer was told.
    (told,) = [v for v in violations if v.rule == "told PAID"]
    assert told.evidence[0]["key"] == PAY_KEY


def test_told_paid_with_two_captures_is_flagged():
    books = good_books()
    doubled = replace(books.orders[ORDER], captures=(AMOUNT, AMOUNT))

    assert "told PAID" in rules(check(good_history(), replace(books, orders={ORDER: doubled})))


def declined_history() -> list[dict[str, Any]]:
    return [
        *good_history()[:3],
        request(PAY_KEY, PAY_PATH, 402, code="payment-declined"),
        intent("pay", PAY_KEY, "fail", 402, code="payment-declined"),
    ]


def declined_books(*, provider_net: int, late: bool, attempt_status: str, order: str) -> Books:
    books = good_books()
    captured = order in ("PAID", "REFUNDED")
    return replace(
        books,
        orders={
            ORDER: replace(
                books.orders[ORDER],
                status=order,
                captures=(AMOUNT,) if captured else (),
                shipments=1 if captured else 0,
            )
        },
        attempts={
            "P1": replace(
                books.attempts["P1"],
                status=attempt_status,
                provider_net=provider_net,
                late_success=late,
            )
        },
        wallets={ALICE: (provider_net, 0)},
        ledger_net={ALICE: provider_net},
    )


def test_a_decline_that_charged_nothing_passes():
    books = declined_books(provider_net=0, late=False, attempt_status="FAILED", order="UNPAID")

    assert check(declined_history(), books) == []


def test_told_declined_but_charged_is_flagged():
    books = declined_books(
        provider_net=AMOUNT, late=False, attempt_status="SUCCEEDED", order="PAID"
    )

    assert rules(check(declined_history(), books)) == ["told 402"]


def test_a_late_success_rolled_forward_is_the_documented_exception():
    books = declined_books(provider_net=AMOUNT, late=True, attempt_status="SUCCEEDED", order="PAID")

    assert check(declined_history(), books) == []


def test_a_wallet_that_disagrees_with_the_books_is_flagged():
    books = replace(good_books(), wallets={ALICE: (AMOUNT * 2, 0)})

    assert rules(check(good_history(), books)) == ["wallet = books"]


REFUND_KEY = "k-refund"
REFUND_PATH = f"/api/v1/orders/{ORDER}/refunds/"


def refunded_history() -> list[dict[str, Any]]:
    """good_history, then Alice refunds the whole order and is told so."""
    return [
        *good_history(),
        request(REFUND_KEY, REFUND_PATH, 200, number=ORDER),
        intent("refund", REFUND_KEY, "ok", 200, refunded_amount=AMOUNT),
    ]


def refunded_books(*, refunded: int, reversed_: int, ledger_net: int) -> Books:
    books = good_books()
    order = replace(
        books.orders[ORDER],
        status="REFUNDED" if refunded == AMOUNT else "PAID",
        refunded_amount=refunded,
        reversed=reversed_,
    )
    return replace(
        books,
        orders={ORDER: order},
        wallets={ALICE: (AMOUNT, refunded)},
        ledger_net={ALICE: ledger_net},
    )


def test_a_refund_reversed_after_the_customer_was_told_is_the_documented_exception():
    # refund_reversal: told refunded, then the provider could not pay it out; the books
    # took it back out of refunded_amount (a reversal entry), and a case tells a person
    books = refunded_books(refunded=0, reversed_=AMOUNT, ledger_net=AMOUNT)

    assert check(refunded_history(), books) == []


def test_told_refunded_but_less_refunded_and_nothing_reversed_is_flagged():
    books = refunded_books(refunded=0, reversed_=0, ledger_net=AMOUNT)

    assert rules(check(refunded_history(), books)) == ["told refunded"]


def test_a_dispute_lost_counts_in_the_wallets_net_debit():
    # dispute_lost: the payer got the money back through the dispute; the books hold
    # its withdrawal, the wallet its disputed_total, and the order stays PAID
    books = replace(good_books(), ledger_net={ALICE: 0}, disputed={ALICE: AMOUNT})

    assert check(good_history(), books) == []
    assert rules(check(good_history(), replace(books, disputed={}))) == ["wallet = books"]


def test_stock_that_is_not_received_minus_live_orders_is_flagged():
    books = replace(good_books(), products={"TEA": (99, 100)})

    assert rules(check(good_history(), books)) == ["stock"]


@pytest.mark.parametrize(
    ("status", "retry_after"), [(500, ""), (502, ""), (504, ""), (503, ""), (500, "1")]
)
def test_a_server_error_other_than_503_with_retry_after_is_flagged(status, retry_after):
    # Even followed by success on the same key: the customer was answered a 5xx the
    # contract does not give (docs/design.md, "Redis down": never a 500).
    history = good_history()
    history.insert(3, request(PAY_KEY, PAY_PATH, status, retry_after=retry_after))
    history.insert(
        0, request(None, "/api/v1/products/", status, method="GET", retry_after=retry_after)
    )

    violations = check(history, good_books())

    assert rules(violations) == ["no 5xx but 503", "no 5xx but 503"]
    assert {v.message.split(" ")[0] for v in violations} == {"read", "pay"}


def node_kill(t: float) -> dict[str, Any]:
    return {"type": "nemesis", "kind": "kill-node", "target": "node-2", "t": t}


@pytest.mark.parametrize(
    ("answered_at", "status", "code", "flagged"),
    [
        (100.2, 502, "", False),  # HAProxy's page: the node died under the request
        (100.2, 502, "internal-error", True),  # a 502 from the shop itself is one
        (100.2, 500, "internal-error", True),  # the shop's 500 is never excused
        (130.0, 502, "", True),  # long after the kill: nothing explains it
        (99.0, 502, "", True),  # before the kill
    ],
)
def test_the_load_balancers_502_right_after_a_node_kill_is_no_answer(
    answered_at, status, code, flagged
):
    history = good_history()
    history.insert(0, node_kill(100.0))
    history.insert(4, request(PAY_KEY, PAY_PATH, status, code=code, t=answered_at))

    violations = check(history, good_books())

    assert rules(violations) == (["no 5xx but 503"] if flagged else [])


def test_a_503_with_retry_after_on_any_endpoint_passes():
    history = good_history()
    history.insert(0, request(None, "/api/v1/products/", 503, method="GET"))
    history.insert(0, request(None, "/api/v1/auth/token/", 503, retry_after="5"))

    assert check(history, good_books()) == []


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "validation-error"), (422, "idempotency-key-mismatch"), (409, "made-up"), (418, "")],
)
def test_answers_outside_the_published_matrix_are_flagged(status, code):
    history = good_history()
    history.insert(3, request(PAY_KEY, PAY_PATH, status, code=code))

    assert "matrix" in rules(check(history, good_books()))


def test_two_different_final_answers_to_one_key_are_flagged():
    history = good_history()
    history.append(request(PAY_KEY, PAY_PATH, 409, code="order-not-payable"))

    assert rules(check(history, good_books())) == ["one answer per key"]


def test_a_202_while_the_provider_waits_for_the_customer_is_not_a_final_answer():
    # 202 payment-action-required, then (the customer acted) 200 with the same key
    history = good_history()
    history.insert(3, request(PAY_KEY, PAY_PATH, 202))
    history.insert(4, intent("pay", PAY_KEY, "info", 202))

    assert rules(check(history, good_books())) == []


def test_a_case_left_open_or_closed_by_a_person_off_the_record_is_flagged():
    books = replace(
        good_books(),
        cases=[
            CaseBook(1, "item-failed", "resolved", None, "settled by the machine", ()),
            CaseBook(2, "discrepancy", "resolved", "op", "dismiss by op: seen", ("op",)),
            CaseBook(3, "unknown-line", "open", None, "", ()),
            CaseBook(4, "unresolved", "resolved", "op", "dismiss by op: seen", ()),
        ],
    )

    violations = check(good_history(), books)

    assert sorted(rules(violations)) == ["case closed", "case closed by a recorded action"]
    assert [v.message.split(" ")[1] for v in violations] == ["3", "4"]


def test_work_left_in_flight_and_a_paid_order_never_shipped_are_flagged():
    books = good_books()
    books = replace(
        books,
        orders={ORDER: replace(books.orders[ORDER], shipments=0)},
        unresolved=["payment P2 still UNKNOWN"],
    )

    assert sorted(rules(check(good_history(), books))) == ["quiescent", "shipped once"]


def test_a_failed_audit_is_a_violation_with_its_output():
    books = replace(good_books(), audit_exit=1, audit_output="FINDING 3: stock")

    (violation,) = check(good_history(), books)

    assert violation.rule == "audit"
    assert "FINDING 3" in violation.message


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", "/api/v1/orders/", "create"),
        ("POST", "/api/v1/orders/N/pay/", "pay"),
        ("POST", "/api/v1/orders/N/cancel/", "cancel"),
        ("POST", "/api/v1/orders/N/refunds/", "refund"),
        ("GET", "/api/v1/orders/N/", "read"),
    ],
)
def test_requests_are_named_by_their_operation(method, path, expected):
    assert operation(method, path) == expected


def test_the_history_reads_back_what_was_recorded(tmp_path):
    history = History(tmp_path / "history.jsonl")
    history.record("intent", op="pay", key="k")
    history.record("nemesis", kind="kill-provider")
    history.close()

    events = history_read(tmp_path / "history.jsonl")

    assert [(e["type"], e["t"] >= 0) for e in events] == [("intent", True), ("nemesis", True)]
    assert events[0]["key"] == "k"
