"""The batched reconcile pass (a fast path) agrees with the core's pass (its reference).

The common answers (the attempt's own success, a decline, a fence) are applied
in a few set-based statements per batch (``fastpaths/settlement.py``) and their
requests finished with one more (``complete_pay_requests``); every other answer
still takes its one-by-one path. Here: the core's ``reconcile_due`` and the
batched pass on the same cases write the same rows and store the same answers;
many attempts with every kind of answer in one pass, each settled as it would
have been alone; a batch's questions asked at once; the statements of a pass
grow with its batches, not with its attempts; two passes at once settle each
attempt once; a batch that fails as a whole falls back to one by one, where only
the culprit fails.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fastpaths import reconcile as batched
from idempotency.models import IdempotencyKey
from operations.audit.run import audit_run
from orders.models import Order, Shipment
from orders.serializers import OrderOutputSerializer, order_representation
from orders.services import LineRequest, order_create
from orders.tasks import fulfil_orders
from payments.flows import PayPoint
from payments.models import UNSETTLED_STATUSES, LedgerEntry, Payment, PaymentStatus, Refund
from payments.providers import (
    ChargeResult,
    ChargeStatus,
    PaymentProvider,
    ProviderOutcomeUnknown,
    get_provider,
)
from payments.services import (
    payment_create,
    payment_mark_unknown,
    payment_settle,
    provider_idempotency_key,
)
from reconcile.recovery import fulfilment
from reconcile.recovery import unsettled_payments as reconcile_payments
from reconcile.recovery import unsettled_refunds as reconcile_refunds
from reconcile.recovery.claims import claim_due
from tests.concurrency.helpers import run_at_once
from tests.conftest import new_key
from tests.factories import ProductFactory, pay_record_plant

pytestmark = pytest.mark.django_db(transaction=True)

PASSES = {
    "core": "reconcile.recovery.unsettled_payments.reconcile_due",
    "batched": "fastpaths.reconcile.reconcile_due_batched",
}


@pytest.fixture(autouse=True)
def batched_pass(settings) -> None:
    """``run_once`` runs the batched pass here, whatever the settings ship."""
    settings.RECONCILE_PAYMENT_PASS = PASSES["batched"]


# --- Attempts left unknown, each with its request at payment_created --------------------------


@dataclass(frozen=True)
class Left:
    """An unknown attempt and the key of the request that made it."""

    payment: Payment
    key: str


@pytest.fixture
def left_unknown(user, fault, settings, sandbox) -> Callable[..., Left]:
    """``left_unknown(provider_did=...)``: what a request that lost its answer leaves.

    ``provider_did``: "charge" (captured), "decline", "nothing" (never reached it),
    or "charge_other_amount" (captured, but not the attempt's amount). ``locked``:
    the request is still alive (a fresh lock on its record).
    """
    provider = get_provider()
    product = ProductFactory.create(stock=1000, price=1999)
    settings.MAX_OPEN_ORDERS_PER_USER = 1000  # one payer, many unpaid orders at once

    def make(*, provider_did: str, locked: bool = False) -> Left:
        order = order_create(
            user_id=user.pk,
            lines=[LineRequest(sku=product.sku, quantity=1)],
            idempotency_key=new_key(),
        )
        payment = payment_create(user_id=user.pk, order_number=order.number)
        key = pay_record_plant(
            user, order, point=PayPoint.PAYMENT_CREATED, payment=payment, locked=locked
        )
        if provider_did != "nothing":
            if provider_did == "decline":
                fault("decline")
            result = provider.charge(
                out_trade_no=payment.out_trade_no,
                amount=payment.amount + (1 if provider_did == "charge_other_amount" else 0),
                currency=payment.currency,
                payer=payment.payer,
                notify_url=f"{settings.SHOP_BASE_URL}/nowhere/",
                idempotency_key=provider_idempotency_key(payment),
            )
            assert result.status == ("DECLINED" if provider_did == "decline" else "SUCCESS")
        payment_mark_unknown(payment_id=payment.pk)
        return Left(Payment.objects.get(pk=payment.pk), key)

    return make


class Scripted:
    """The sandbox, except for the attempts given another answer (``script``)."""

    def __init__(self, real: PaymentProvider, script: dict[str, Callable[[], Any]]) -> None:
        self.real, self.script = real, script

    def query(self, *, out_trade_no: str, trade_no: str | None = None) -> ChargeResult | None:
        if out_trade_no in self.script:
            return self.script[out_trade_no]()
        return self.real.query(out_trade_no=out_trade_no, trade_no=trade_no)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _answer(key: str) -> tuple[int | None, Any]:
    record = IdempotencyKey.objects.get(key=key)
    assert record.recovery_point == "finished", record
    return record.response_status, json.loads(record.response_body)


# --- The core's pass and the batched pass, on the same cases ---------------------------------

# One attempt of each kind; "alive": charged, its request still holding its record;
# "unreachable": the provider does not answer about it; "misnamed": its answer is
# about another attempt (the first).
KINDS = [
    "charge",
    "charge",
    "decline",
    "nothing",
    "charge_other_amount",
    "alive",
    "unreachable",
    "misnamed",
]


def _leave(left_unknown: Callable[..., Left], kind: str) -> Left:
    if kind == "alive":
        return left_unknown(provider_did="charge", locked=True)
    if kind in ("unreachable", "misnamed"):
        return left_unknown(provider_did="nothing")
    return left_unknown(provider_did=kind)


def _masked(text: str, order: Order, payment: Payment) -> str:
    """``text`` with what differs between two alike attempts named instead of shown."""
    shown = OrderOutputSerializer(order).data
    names = {
        payment.out_trade_no: "<attempt>",
        payment.trade_no: "<charge>",
        order.number: "<order>",
        shown["created_at"]: "<created>",
        shown["paid_at"]: "<paid>",
    }
    for value in sorted((v for v in names if v), key=len, reverse=True):
        text = text.replace(str(value), names[value])
    return text


def _written(left: Left) -> tuple[Any, ...]:
    """Every row written about the attempt, and its request's stored answer, byte for
    byte but for the references and times that differ between two alike attempts."""
    payment = Payment.objects.get(pk=left.payment.pk)
    order = Order.objects.get(pk=payment.order_id)
    record = IdempotencyKey.objects.get(key=left.key)
    entries = [
        (e.kind, e.amount, e.currency, e.trade_no == payment.trade_no)
        for e in LedgerEntry.objects.filter(payment=payment).order_by("pk")
    ]
    refunds = [
        (r.status, r.amount, r.reason)
        for r in Refund.objects.filter(payment=payment).order_by("pk")
    ]
    return (
        (payment.status, payment.failure_code, bool(payment.trade_no)),
        (payment.settled_at is not None, payment.reconcile_attempts),
        payment.next_reconcile_at is not None and payment.next_reconcile_at > timezone.now(),
        (order.status, order.paid_at is not None, order.refunded_amount),
        entries,
        refunds,
        (record.recovery_point, record.response_status, record.lock_token is not None),
        _masked(json.dumps(record.response_headers, sort_keys=True), order, payment),
        _masked(record.response_body or "", order, payment),
    )


def test_the_core_pass_and_the_batched_pass_write_the_same_rows(
    left_unknown, settings, due_at_once
):
    real = get_provider()

    def no_answer() -> ChargeResult | None:
        raise ProviderOutcomeUnknown("connection refused")

    written = {}
    for name, dotted in PASSES.items():
        # Given one set of attempts of every kind (the other pass's set is settled,
        # or backing off: not due)
        settings.RECONCILE_PAYMENT_PASS = dotted
        lefts = [_leave(left_unknown, kind) for kind in KINDS]
        unreachable = lefts[KINDS.index("unreachable")].payment.out_trade_no
        misnamed = lefts[KINDS.index("misnamed")].payment.out_trade_no
        another = lefts[0].payment.out_trade_no

        def about_another(another: str = another) -> ChargeResult | None:
            return ChargeResult(
                out_trade_no=another,
                status=ChargeStatus.DECLINED,
                trade_no=None,
                amount=None,
                currency=None,
                decline_reason="do_not_honor",
            )

        provider = Scripted(real, {unreachable: no_answer, misnamed: about_another})

        # When the pass the setting names runs over them, in batches of 3
        counts = reconcile_payments.run_once(provider=provider, batch_size=3)

        written[name] = (dataclasses.asdict(counts), [_written(left) for left in lefts])

    # Then both passes did the same, and wrote the same rows and answers
    assert written["core"][0]["claimed"] == len(KINDS)
    assert written["batched"] == written["core"]


# --- A batch's questions, asked at once --------------------------------------------------------


def test_a_batch_s_questions_are_asked_at_once_and_answers_applied_in_the_pass_thread(
    unknown_payment, user, sandbox, due_at_once, monkeypatch
):
    # Given four due attempts, and questions that can only all return if they are
    # out at the same time (each waits for the other three)
    for _ in range(4):
        unknown_payment(user, charged=False)
    together = threading.Barrier(4, timeout=10)
    applied_in: set[int] = set()
    real = get_provider()

    class AllAtOnce:
        def query(self, *, out_trade_no: str, trade_no: str | None = None) -> Any:
            together.wait()
            return real.query(out_trade_no=out_trade_no, trade_no=trade_no)

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    apply = batched.payment_answers_apply

    def applied_here(answers: Any, *, provider: Any) -> Any:
        applied_in.add(threading.get_ident())
        return apply(answers, provider=provider)

    monkeypatch.setattr(batched, "payment_answers_apply", applied_here)

    # When one batch of four is reconciled four questions at a time
    counts = batched.reconcile_due_batched(
        provider=AllAtOnce(), batch_size=4, budget_s=30, concurrency=4
    )

    # Then every question was answered (a broken barrier would be an error), and
    # every answer applied here (the database work never runs in the askers' threads)
    assert counts.rolled_back == 4
    assert applied_in == {threading.get_ident()}


# --- Every kind of answer in one pass --------------------------------------------------------


def test_a_pass_over_attempts_with_every_kind_of_answer_settles_each_as_alone(
    left_unknown, user, wallet, due_at_once
):
    # Given unknown attempts the provider charged, declined or never saw ...
    charged = [left_unknown(provider_did="charge") for _ in range(5)]
    declined = [left_unknown(provider_did="decline") for _ in range(3)]
    unseen = [left_unknown(provider_did="nothing") for _ in range(5)]
    # ... one it captured for another amount (an orphan), one whose request is alive,
    other_amount = left_unknown(provider_did="charge_other_amount")
    alive = left_unknown(provider_did="charge", locked=True)
    # ... and three whose answer is not the plain truth: unreachable, about another
    # attempt, and one a notification settles while the question is out
    unreachable = left_unknown(provider_did="nothing")
    misnamed = left_unknown(provider_did="nothing")
    settled_meanwhile = left_unknown(provider_did="charge")
    real = get_provider()

    def settle_by_notification() -> ChargeResult | None:
        truth = real.query(out_trade_no=settled_meanwhile.payment.out_trade_no)
        assert truth is not None
        try:  # a notification applied in another connection, before the answer returns
            assert payment_settle(payment_id=settled_meanwhile.payment.pk, result=truth)
        finally:
            connection.close()
        return truth

    def no_answer() -> ChargeResult | None:
        raise ProviderOutcomeUnknown("connection refused")

    def about_another() -> ChargeResult | None:
        return ChargeResult(
            out_trade_no=charged[0].payment.out_trade_no,
            status=ChargeStatus.DECLINED,
            trade_no=None,
            amount=None,
            currency=None,
            decline_reason="do_not_honor",
        )

    provider = Scripted(
        real,
        {
            unreachable.payment.out_trade_no: no_answer,
            misnamed.payment.out_trade_no: about_another,
            settled_meanwhile.payment.out_trade_no: settle_by_notification,
        },
    )

    # When one pass runs, in batches of 4 (several batches, every kind mixed in)
    counts = reconcile_payments.run_once(provider=provider, batch_size=4)

    # Then every attempt is settled as it would have been on its own
    assert counts.claimed == 18
    assert counts.rolled_forward == len(charged) + 1  # + the request still alive
    assert counts.rolled_back == len(declined) + len(unseen)
    assert (counts.orphaned, counts.already_settled) == (1, 1)
    assert (counts.unreachable, counts.conflict, counts.error) == (1, 1, 0)
    for left in charged:
        payment = Payment.objects.get(pk=left.payment.pk)
        assert (payment.status, payment.failure_code) == ("SUCCEEDED", "")
        entry = LedgerEntry.objects.get(payment=payment)
        assert (entry.kind, entry.trade_no, entry.amount) == ("capture", payment.trade_no, 1999)
        assert Order.objects.get(pk=payment.order_id).status == "PAID"
        assert _answer(left.key) == (200, order_representation(order_id=payment.order_id))
    for left in declined:
        payment = Payment.objects.get(pk=left.payment.pk)
        assert payment.status == "FAILED"
        assert payment.failure_code not in ("", "closed")
        status, body = _answer(left.key)
        assert (status, body["code"]) == (402, "payment-declined")
    for left in unseen:
        payment = Payment.objects.get(pk=left.payment.pk)
        assert (payment.status, payment.failure_code) == ("FAILED", "closed")
        fence = real.query(out_trade_no=payment.out_trade_no)
        assert fence is not None
        assert fence.status == "CLOSED"  # fenced before it was failed
        status, body = _answer(left.key)
        assert (status, body["code"]) == (402, "payment-failed")
    failed = [left.payment.pk for left in declined + unseen]
    assert not LedgerEntry.objects.filter(payment_id__in=failed).exists()
    assert not Order.objects.filter(payments__pk__in=failed).exclude(status="UNPAID").exists()
    # ... the orphan booked and being refunded, its request answered as such
    assert Payment.objects.get(pk=other_amount.payment.pk).status == "ORPHANED"
    assert _answer(other_amount.key)[0] == 402
    # ... the attempt settled meanwhile settled once, its request finished
    assert LedgerEntry.objects.filter(payment=settled_meanwhile.payment).count() == 1
    assert _answer(settled_meanwhile.key)[0] == 200
    # ... the alive request's attempt settled, its record left to that request
    assert Payment.objects.get(pk=alive.payment.pk).status == "SUCCEEDED"
    record = IdempotencyKey.objects.get(key=alive.key)
    assert (record.recovery_point, record.response_status) == ("payment_created", None)
    assert record.lock_token is not None
    assert counts.completed == len(charged) + len(declined) + len(unseen) + 2
    # ... and the two left for later are exactly as they were, the unreachable one backing off
    for left, tries in ((unreachable, 1), (misnamed, 1)):
        payment = Payment.objects.get(pk=left.payment.pk)
        assert (payment.status, payment.reconcile_attempts) == ("UNKNOWN", tries)
        assert payment.next_reconcile_at is not None
        assert payment.next_reconcile_at > timezone.now()
        assert IdempotencyKey.objects.get(key=left.key).recovery_point == "payment_created"
    # The provider's books and ours agree, once the orphan's refund went out
    paid = len(charged) + 2
    assert wallet(user)["charged_total"] == paid * 1999 + 2000
    reconcile_refunds.run_once()
    IdempotencyKey.objects.filter(key=alive.key).update(lock_token=None, locked_at=None)
    Payment.objects.filter(pk__in=[unreachable.payment.pk, misnamed.payment.pk]).update(
        next_reconcile_at=None
    )
    reconcile_payments.run_once()  # the two left for later, with the plain truth now
    fulfilment.run_once()  # no worker here: the sweep ships what the messages would have
    report = audit_run()
    assert report.ok, report.findings


# --- Statements grow with the batches, not with the attempts -----------------------------------

# The statements one batch costs, whatever its size: claim, lock the orders, move
# the attempts, insert the captures, mark the orders paid, BEGIN/COMMIT; read the
# records, the attempts, the orders (with lines, payments, refunds), finish the
# records, BEGIN/COMMIT. One more claim (the empty one) ends the pass.
STATEMENTS_PER_BATCH = 16


def _seed(user, count: int) -> None:
    """``count`` unknown attempts with records, every other one charged (in bulk)."""
    from tools.bench.reconcile_pass import seed_unknown_attempts

    seed_unknown_attempts(user_id=user.pk, count=count, tag=str(count))


@pytest.mark.parametrize("attempts", [20, 100])
def test_the_statements_of_a_pass_grow_with_its_batches_not_its_attempts(
    attempts, user, sandbox, due_at_once
):
    _seed(user, attempts)

    with CaptureQueriesContext(connection) as captured:
        counts = reconcile_payments.run_once(batch_size=50)

    assert counts.completed == attempts
    batches = math.ceil(attempts / 50)
    # One attempt at a time cost about 16 statements each; a batch costs that in all.
    assert len(captured) <= STATEMENTS_PER_BATCH * batches + 1, "\n".join(
        q["sql"][:120] for q in captured
    )


# --- The claim ----------------------------------------------------------------------------------


def test_the_one_statement_claim_leases_the_rows_the_core_s_claim_leases(user, due_at_once):
    """``claim_due_at_once`` against ``claims.claim_due``: from the same rows, the same
    attempts leased (the oldest due ones), with the same lease; a settled attempt and
    one backing off are left alone."""
    _seed(user, 6)
    now = timezone.now()
    ids = list(Payment.objects.order_by("pk").values_list("pk", flat=True))
    for age, pk in enumerate(ids):  # the first attempt is the youngest
        Payment.objects.filter(pk=pk).update(updated_at=now - timedelta(hours=age + 1))
    backing_off, settled = ids[-1], ids[-2]  # the two oldest
    Payment.objects.filter(pk=backing_off).update(next_reconcile_at=now + timedelta(hours=1))
    Payment.objects.filter(pk=settled).update(status=PaymentStatus.SUCCEEDED)
    before = list(Payment.objects.order_by("pk").values())

    def claimed(claim: Callable[[], list[Payment]]) -> tuple[list[int], list[Any]]:
        rows = claim()
        written = list(Payment.objects.order_by("pk").values())
        for row in before:  # the same starting rows for the other claim
            Payment.objects.filter(pk=row["id"]).update(next_reconcile_at=row["next_reconcile_at"])
        return sorted(row.pk for row in rows), written

    core = claimed(lambda: claim_due(Payment, statuses=UNSETTLED_STATUSES, now=now, limit=3))
    fast = claimed(lambda: batched.claim_due_at_once(now=now, limit=3))

    assert core == fast
    assert core[0] == sorted(ids[-5:-2])  # the three oldest due
    lease = now + timedelta(seconds=settings.RECONCILE_LEASE_S)
    assert {row["id"] for row in core[1] if row["next_reconcile_at"] == lease} == set(core[0])
    assert list(Payment.objects.order_by("pk").values()) == before


# --- Two passes at once -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("lease_s", [600, 0], ids=["leased", "no-lease"])
def test_two_batched_passes_at_once_settle_each_attempt_once(
    left_unknown, user, wallet, settings, due_at_once, lease_s
):
    # Without a lease the two passes claim the same attempts: only the conditional
    # writes stand between them and a double settlement.
    settings.RECONCILE_LEASE_S = lease_s
    attempts = [left_unknown(provider_did="charge" if n % 2 else "nothing") for n in range(24)]

    passes = run_at_once(2, lambda _: reconcile_payments.run_once(batch_size=6))

    settled = sum(p.rolled_forward + p.rolled_back for p in passes)
    assert settled == 24  # each attempt settled by exactly one of them
    assert sum(p.rolled_forward for p in passes) == 12
    assert sum(p.error for p in passes) == 0
    if lease_s:
        assert sum(p.claimed for p in passes) == 24  # disjoint claims
    assert Payment.objects.filter(status="SUCCEEDED").count() == 12
    assert Payment.objects.filter(status="FAILED", failure_code="closed").count() == 12
    assert LedgerEntry.objects.count() == 12
    assert Order.objects.filter(status="PAID").count() == 12
    assert wallet(user)["charged_total"] == 12 * attempts[0].payment.amount
    finished = IdempotencyKey.objects.filter(recovery_point="finished")
    assert finished.count() == 24
    assert sum(p.completed for p in passes) == 24  # each request finished once
    connections.close_all()


# --- The orders a batch paid are shipped ----------------------------------------------------------


@pytest.mark.slow
def test_the_orders_a_batch_paid_are_shipped_once_by_its_one_message(
    worker, left_unknown, due_at_once
):
    charged = [left_unknown(provider_did="charge") for _ in range(4)]

    assert reconcile_payments.run_once().rolled_forward == 4

    # One message for the batch, consumed by a real worker: each order shipped once
    orders = [left.payment.order_id for left in charged]
    shipped = Shipment.objects.filter(order_id__in=orders)
    worker.wait_for(lambda: shipped.count() == 4, what="the batch's shipments")
    fulfil_orders.delay(orders)  # a redelivered message, or a doubled enqueue
    worker.wait_for(lambda: _runs(worker, "fulfil_orders") == 2, what="the extra run")
    assert sorted(shipped.values_list("order_id", flat=True)) == sorted(orders)
    assert _runs(worker, "fulfil_order") == 0  # no message per order


def _runs(worker, task: str) -> int:
    """How many runs of ``orders.tasks.<task>`` the worker finished."""
    return sum(f"orders.tasks.{task}[" in line and "succeeded" in line for line in worker.log)


# --- A batch that fails as a whole ---------------------------------------------------------------


def test_a_batch_that_fails_falls_back_to_one_by_one_where_only_the_culprit_fails(
    left_unknown, user, due_at_once
):
    # Given a batch in which one capture's trade_no is already in the books (a bug
    # elsewhere booked it against another attempt): the batch's ledger INSERT fails
    good = [left_unknown(provider_did="charge") for _ in range(3)]
    culprit = left_unknown(provider_did="charge")
    truth = get_provider().query(out_trade_no=culprit.payment.out_trade_no)
    assert truth is not None
    assert truth.trade_no is not None
    victim = Order.objects.create(user=user, amount=1, currency="CNY")
    other = Payment.objects.create(
        order=victim, out_trade_no="P-OTHER", amount=1, currency="CNY", payer="x", status="FAILED"
    )
    LedgerEntry.objects.create(
        kind="orphan_capture",
        order=victim,
        payment=other,
        trade_no=truth.trade_no,
        amount=1,
        currency="CNY",
    )

    # When the pass runs
    counts = reconcile_payments.run_once()

    # Then the others are settled one by one, and only the culprit failed (backing off)
    assert (counts.rolled_forward, counts.error) == (3, 1)
    for left in good:
        assert Payment.objects.get(pk=left.payment.pk).status == "SUCCEEDED"
        assert _answer(left.key)[0] == 200
    payment = Payment.objects.get(pk=culprit.payment.pk)
    assert (payment.status, payment.reconcile_attempts) == ("UNKNOWN", 1)
    assert not LedgerEntry.objects.filter(payment=payment).exists()
    assert Order.objects.get(pk=payment.order_id).status == "UNPAID"
