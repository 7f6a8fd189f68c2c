"""The sandbox under real concurrency: threads, own connections, real PostgreSQL.

Each scenario releases its threads together (a barrier) and then checks what
the database holds: the constraints and conditional UPDATEs, not luck, decide.
"""

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, transaction

from demo.sandbox.models import Charge, Fault, IdempotencyRecord, Wallet
from demo.sandbox.services import charge_close, charge_create, fault_set
from edge.errors import ApplicationError
from tests.concurrency.helpers import run_at_once
from tests.demo.sandbox.conftest import NOTIFY_URL, new_ref

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

START = settings.SANDBOX_WALLET_START


def terms(**overrides: Any) -> dict[str, Any]:
    base = {
        "out_trade_no": new_ref(),
        "amount": 100,
        "currency": "CNY",
        "payer": "alice",
        "notify_url": NOTIFY_URL,
    }
    return {**base, **overrides}


def attempt(call: Any) -> Any:
    """The call's result, or the ApplicationError it raised (as a value to count)."""
    try:
        return call()
    except ApplicationError as error:
        return error


class Holder:
    """Runs ``work`` in its own thread and transaction, and holds it open (uncommitted)
    until ``commit()``: the competing request runs exactly between the two steps."""

    def __init__(self, work: Callable[[], Any]) -> None:
        self.done = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(work,))

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            with transaction.atomic():
                work()
                self.done.set()
                self.release.wait(10)
        finally:
            connection.close()

    def __enter__(self) -> "Holder":
        self.thread.start()
        assert self.done.wait(10)
        return self

    def commit(self) -> None:
        self.release.set()
        self.thread.join(10)

    def __exit__(self, *exc: object) -> None:
        self.commit()


class Contender:
    """Runs ``work`` in its own thread; knows its backend pid to see it wait on a lock."""

    def __init__(self, work: Callable[[], Any]) -> None:
        self.result: Any = None
        self.pid: int | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(work,))
        self.thread.start()
        assert self.started.wait(10)

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
            self.started.set()
            self.result = attempt(work)
        finally:
            connection.close()

    def wait_until_blocked(self) -> None:
        """Until PostgreSQL reports this contender waiting on a lock (no blind sleep)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [self.pid]
                )
                row = cursor.fetchone()
            if row and row[0] == "Lock":
                return
            time.sleep(0.01)
        raise AssertionError("the contender never blocked on a lock")

    def join(self) -> Any:
        self.thread.join(10)
        return self.result


def test_a_charge_blocked_behind_an_uncommitted_close_answers_closed_and_debits_nothing():
    body = terms(payer="bob")

    with Holder(lambda: charge_close(out_trade_no=body["out_trade_no"])) as close:
        # The charge misses the uncommitted fence on its first read, debits the
        # wallet, and then waits on the out_trade_no index entry the close holds.
        charge = Contender(lambda: charge_create(idempotency_key="k-blocked", **body))
        charge.wait_until_blocked()
        close.commit()
        answer = charge.join()

    assert answer.body["status"] == "CLOSED"
    assert Charge.objects.get().status == "CLOSED"
    assert not Wallet.objects.exists()  # the debit (and the new wallet) rolled back
    assert IdempotencyRecord.objects.get(key="k-blocked").response_body["status"] == "CLOSED"


def test_a_close_blocked_behind_an_uncommitted_charge_gets_409():
    body = terms()

    with Holder(lambda: charge_create(idempotency_key="k-first", **body)) as charge:
        close = Contender(lambda: charge_close(out_trade_no=body["out_trade_no"]))
        close.wait_until_blocked()
        charge.commit()
        refused = close.join()

    assert refused.code == "charge-already-succeeded"
    assert refused.extra["trade_status"] == "SUCCESS"
    assert Charge.objects.get().status == "SUCCESS"
    assert Wallet.objects.get().charged_total == 100


def test_concurrent_charges_consume_a_fault_count_exactly_once():
    fault_set(mode="decline", count=3, delay_s=0, copies=1)

    answers = run_at_once(12, lambda index: charge_create(idempotency_key=f"k-{index}", **terms()))

    statuses = Counter(answer.body["status"] for answer in answers)
    assert statuses == {"DECLINED": 3, "SUCCESS": 9}
    assert Fault.objects.get().remaining == 0
    assert Wallet.objects.get().balance == START - 9 * 100


def test_identical_charges_at_once_charge_once():
    body = terms()

    answers = run_at_once(15, lambda _: charge_create(idempotency_key="k-same", **body))

    assert len({answer.body["trade_no"] for answer in answers}) == 1
    assert [answer.replayed for answer in answers].count(False) == 1
    assert Charge.objects.count() == 1
    assert IdempotencyRecord.objects.count() == 1
    assert Wallet.objects.get().balance == START - 100


def test_one_attempt_under_many_keys_at_once_charges_once():
    body = terms(payer="first-time-payer")  # the wallet is created by the race, too

    answers = run_at_once(15, lambda index: charge_create(idempotency_key=f"k-{index}", **body))

    assert len({answer.body["trade_no"] for answer in answers}) == 1
    assert Charge.objects.count() == 1
    assert IdempotencyRecord.objects.count() == 15
    wallet = Wallet.objects.get()
    assert (wallet.balance, wallet.charged_total) == (START - 100, 100)


def test_a_charge_and_a_close_racing_never_both_win():
    outcomes: Counter[str] = Counter()
    for round_ in range(8):
        body = terms()

        def act(index: int, body: dict[str, Any] = body, round_: int = round_) -> Any:
            if index == 0:
                return attempt(lambda: charge_create(idempotency_key=f"k-{round_}", **body))
            return attempt(lambda: charge_close(out_trade_no=body["out_trade_no"]))

        charged, closed = run_at_once(2, act)

        final = Charge.objects.get(out_trade_no=body["out_trade_no"])
        if final.status == "SUCCESS":
            # The charge won: the close learns it too late to fence (409).
            assert charged.body["status"] == "SUCCESS"
            assert getattr(closed, "code", None) == "charge-already-succeeded"
        else:
            # The close won: the charge dedupes onto the fence and moves no money.
            assert final.status == "CLOSED"
            assert charged.body["status"] == "CLOSED"
            assert closed.status == "CLOSED"
        outcomes[final.status] += 1

    successes = Charge.objects.filter(status="SUCCESS").count()
    assert successes == outcomes["SUCCESS"]
    charged_total = Wallet.objects.filter(payer="alice").values_list("charged_total", flat=True)
    assert sum(charged_total) == successes * 100
