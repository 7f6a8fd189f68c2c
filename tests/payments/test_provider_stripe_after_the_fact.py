"""Money that moves after the fact, on Stripe (docs/design.md, "Money that moves after
the fact"): the whole statement, refunds that fail after succeeding, captures no
attempt of ours recorded, disputes.

Against localstripe (tests/stripe_emulator.py) through ``StripeProxy``, which
adds, in the shapes Stripe documents, what localstripe cannot produce: balance
transactions other than charges and refunds, a refund that failed, disputes,
a 429. Events localstripe never sends (``refund.updated`` with ``failed``,
``charge.dispute.*``) are built here as Stripe documents them and signed as
Stripe signs them; each says where it differs from what Stripe would send.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import requests
from django.db import connection
from django.utils import timezone

from callbacks.models import ProviderNotification
from operations.audit.checks import statements as statement_checks
from operations.audit.run import audit_run
from operations.statements.importing import StatementFailed, statement_reconcile
from operations.statements.jobs import leftovers_run_once
from operations.statements.models import LineKind, LineOutcome, StatementImport, StatementLine
from operations.statements.passes import pass_run_once
from orders.models import Order
from payments.models import Dispute, LedgerEntry, Payment, Refund
from payments.providers import ChargeStatus, StatementKind, get_provider, stripe_statement
from reconcile.desk.models import Case, CaseKind
from reconcile.models import StrayCapture
from tests.conftest import new_key
from tests.payments.test_provider_stripe import _event, _post_event
from tests.stripe_emulator import emulator

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_localstripe(stripe_shop: str) -> None:
    """localstripe lives for the session: each test here starts from an empty account,
    so a day's balance transactions are this test's only (as on a real day). Its
    webhook registrations outlive that (another module registers one on the shop):
    pointed at a closed port, localstripe's own events stay out of these tests,
    which send each event they need themselves."""
    assert requests.delete(f"{stripe_shop}/_config/data", timeout=5).status_code == 200
    nowhere = {"url": "http://127.0.0.1:9/", "secret": "whsec_nowhere"}
    answer = requests.post(f"{stripe_shop}/_config/webhooks/onceshop", data=nowhere, timeout=5)
    assert answer.status_code == 200


def _today():
    return timezone.now().date()


def _refund(client: Any, order: Order, amount: int | None = None) -> Refund:
    body: dict[str, Any] = {"reason": "test"}
    if amount is not None:
        body["amount"] = amount
    answer = client.post(
        f"/api/v1/orders/{order.number}/refunds/",
        body,
        format="json",
        headers={"Idempotency-Key": new_key()},
    )
    assert answer.status_code == 200, answer.content
    return Refund.objects.filter(order=order).latest("pk")


def _transaction(kind: str, category: str, amount: int, source: Any, **extra: Any) -> dict:
    """A balance transaction as Stripe lists it (``expand: data.source``)."""
    return {
        "id": f"txn_{kind}_{time.monotonic_ns()}",
        "object": "balance_transaction",
        "amount": amount,
        "currency": "cny",
        "created": int(time.time()),
        "type": kind,
        "reporting_category": category,
        "fee": 0,
        "net": amount,
        "status": "available",
        "source": source,
        **extra,
    }


def _captured_elsewhere(url: str, amount: int, metadata: dict[str, str]) -> dict:
    """A PaymentIntent created and confirmed straight at Stripe, not by the shop."""
    client = emulator(url)
    intent = client.v1.payment_intents.create(
        params={
            "amount": amount,
            "currency": "cny",
            "payment_method": "pm_card_visa",
            "metadata": metadata,
        }
    )
    return client.v1.payment_intents.confirm(intent["id"]).to_dict()


def _assert_clean() -> None:
    report = audit_run()
    assert report.findings == [], [finding.message for finding in report.findings]


# --- 1. The statement reads every line type ------------------------------------------


def test_the_statement_reads_every_line_type_and_never_raises(stripe_proxy, pay, order, client):
    # Given a day with a charge and a refund of ours, a payout, a fee, a refund of a
    # non-card method (payment_refund), and a type Stripe may add tomorrow
    assert pay().status_code == 200
    attempt = _refund(client, order, 100)
    payout = {"id": "po_1", "object": "payout", "amount": 5000, "currency": "cny"}
    stripe_proxy.transactions += [
        _transaction("payout", "payout", -5000, payout),
        _transaction("stripe_fee", "fee", -30, None),
        _transaction("climate_order_purchase", "climate_order_purchase", -10, "climorder_1"),
    ]

    counts = statement_reconcile(day=_today())

    # Then every line is read: ours matched, the account's own recorded as not ours
    statement = StatementImport.objects.get(day=_today())
    assert (statement.downloads, statement.error) == (1, "")
    lines = {line.kind: line for line in StatementLine.objects.all()}
    assert lines[LineKind.CHARGE].outcome == LineOutcome.MATCHED
    assert lines[LineKind.REFUND].outcome == LineOutcome.MATCHED
    assert lines[LineKind.REFUND].provider_id == attempt.refund_id
    others = StatementLine.objects.filter(kind=LineKind.OTHER)
    assert sorted(others.values_list("reference", "amount")) == [
        ("climate_order_purchase", 10),
        ("payout", 5000),
        ("stripe_fee", 30),
    ]
    assert set(others.values_list("outcome", flat=True)) == {LineOutcome.NOT_OURS}
    assert (counts.matched, counts.not_ours, counts.discrepancies) == (2, 3, 0)
    _assert_clean()


def test_a_day_that_cannot_be_read_is_a_finding_and_a_later_pass_reads_it(
    stripe_proxy, pay, order, settings
):
    assert pay().status_code == 200
    settings.RECONCILE_AFTER_S = 0
    # Given Stripe answering the statement's download with a 500
    stripe_proxy.fail(lambda path, _: path == "/v1/balance_transactions", status=500)

    with pytest.raises(StatementFailed):
        statement_reconcile(day=_today())

    # Then the day is not "every line matched": the audit reports it, with why
    statement = StatementImport.objects.get(day=_today())
    assert statement.downloads == 0
    assert "ProviderOutcomeUnknown" in statement.error
    assert not StatementLine.objects.exists()
    found = [f for f in audit_run().findings if f.invariant == statement_checks.STATEMENT_IMPORTED]
    assert [f.ids["statement"] for f in found] == [statement.pk]

    # When a later pass runs: it downloads the day again, and the books close
    assert leftovers_run_once().downloaded == 1
    statement.refresh_from_db()
    assert (statement.downloads, statement.error) == (1, "")
    assert StatementLine.objects.get().outcome == LineOutcome.MATCHED
    _assert_clean()


def test_a_day_never_downloaded_whole_is_a_finding_not_an_empty_day(stripe_proxy, settings):
    # Given the import row a process killed mid-download leaves: no error, no download
    settings.RECONCILE_AFTER_S = 0
    statement = StatementImport.objects.create(provider="stripe", day=_today())
    StatementImport.objects.filter(pk=statement.pk).update(
        created_at=timezone.now() - timedelta(seconds=5)
    )

    found = [f for f in audit_run().findings if f.invariant == statement_checks.STATEMENT_IMPORTED]

    assert [f.message for f in found] == [
        f"statement stripe {_today()} not imported: never downloaded whole"
    ]
    leftovers_run_once()
    statement.refresh_from_db()
    assert statement.downloads == 1
    _assert_clean()


def test_a_429_is_waited_out_and_paging_goes_on_from_the_page_that_failed(
    stripe_proxy, pay, order, monkeypatch
):
    # Given a day of two pages (payouts enough to fill one), and Stripe answering the
    # second page 429 once
    monkeypatch.setattr(stripe_statement, "BACKOFF_BASE_S", 0.01)
    assert pay().status_code == 200
    stripe_proxy.transactions += [
        _transaction("payout", "payout", -1, {"id": f"po_{n}", "object": "payout"})
        for n in range(stripe_statement.PAGE_SIZE + 5)
    ]
    stripe_proxy.fail(
        lambda path, query: path == "/v1/balance_transactions" and "starting_after" in query
    )
    # ... and, while the shop waits on Stripe, nothing of it holds a transaction open
    open_while_asked: list[int] = []

    def count_open_transactions(path: str) -> None:
        with psycopg.connect(**_libpq(connection.settings_dict), autocommit=True) as probe:
            row = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()"
            ).fetchone()
        assert row is not None
        open_while_asked.append(row[0])

    stripe_proxy.on_request = count_open_transactions

    counts = statement_reconcile(day=_today())

    # Then the whole day is read: the first page once, the second asked again after the
    # 429, never the day from the start
    pages = stripe_proxy.requests_to("/v1/balance_transactions")
    assert [("starting_after" in page) for page in pages] == [False, True, True]
    assert counts.downloaded == stripe_statement.PAGE_SIZE + 6
    assert StatementLine.objects.get(kind=LineKind.CHARGE).outcome == LineOutcome.MATCHED
    assert len(open_while_asked) == len(pages)
    assert set(open_while_asked) == {0}
    _assert_clean()


def _libpq(database: dict[str, Any]) -> dict[str, Any]:
    return {
        "dbname": database["NAME"],
        "user": database["USER"],
        "host": database["HOST"] or None,
        "port": database["PORT"] or None,
        "password": database["PASSWORD"] or None,
    }


# --- 2. Refund reversals --------------------------------------------------------------


def _failed(refund: Refund) -> dict[str, Any]:
    """What Stripe shows of a refund that failed after its money left our balance."""
    return {
        "status": "failed",
        "failure_reason": "expired_or_canceled_card",
        "failure_balance_transaction": f"txn_failure_{refund.refund_id}",
    }


def test_refund_updated_failed_is_asked_once_reversed_in_the_books_and_a_case_opened(
    stripe_proxy, pay, order, client, settings
):
    settings.RECONCILE_AFTER_S = 0
    # Given a full refund Stripe said succeeded, that later failed (a closed card)
    assert pay().status_code == 200
    attempt = _refund(client, order)
    assert Order.objects.get(pk=order.pk).status == Order.Status.REFUNDED
    stripe_proxy.refunds[attempt.refund_id] = _failed(attempt)
    # Stripe's refund.updated, as documented (the emulator sends no refund events)
    body = _event(
        "refund.updated",
        {
            "id": attempt.refund_id,
            "object": "refund",
            "amount": attempt.amount,
            "currency": order.currency.lower(),
            "payment_intent": attempt.payment.trade_no,
            **_failed(attempt),
            "metadata": {
                "out_refund_no": attempt.refund_no,
                "out_trade_no": attempt.payment.out_trade_no,
            },
        },
        "evt_refund_failed",
        created=int(time.time()),
    )

    # When it arrives: stored, 200, not applied on its word
    answer = _post_event(body)
    assert (answer.status_code, answer.json()["outcome"]) == (200, "deferred")
    assert Refund.objects.get(pk=attempt.pk).status == "SUCCEEDED"

    # ... and the reconciler asks Stripe once
    pass_run_once()
    asked = len(stripe_proxy.requests_to("/v1/refunds"))

    # Then the reversal is booked once, the order back to PAID, a person told
    attempt.refresh_from_db()
    order.refresh_from_db()
    assert (attempt.status, attempt.failure_code) == ("REVERSED", "expired_or_canceled_card")
    assert (order.status, order.refunded_amount) == (Order.Status.PAID, 0)
    assert LedgerEntry.objects.filter(kind="refund_reversal", refund_attempt=attempt).count() == 1
    row = ProviderNotification.objects.get(notify_id="evt_refund_failed")
    assert row.resolved_at is not None
    assert Case.objects.filter(kind=CaseKind.REFUND_REVERSED, subject_id=attempt.pk).count() == 1
    # ... and never asked about again
    pass_run_once()
    pass_run_once()
    assert len(stripe_proxy.requests_to("/v1/refunds")) == asked
    assert Case.objects.filter(kind=CaseKind.REFUND_REVERSED).count() == 1
    _assert_clean()


def test_a_refund_failure_on_the_statement_is_matched_to_its_reversal(
    stripe_proxy, pay, order, client
):
    # Given a refund that failed after it succeeded, which no event told the shop of
    assert pay().status_code == 200
    attempt = _refund(client, order, 300)
    stripe_proxy.refunds[attempt.refund_id] = _failed(attempt)
    refund_object = {
        "id": attempt.refund_id,
        "object": "refund",
        "amount": 300,
        "currency": "cny",
        "payment_intent": {"id": attempt.payment.trade_no, "metadata": {}},
        "metadata": {"out_refund_no": attempt.refund_no},
        **_failed(attempt),
    }
    stripe_proxy.transactions.append(
        _transaction("refund_failure", "refund_failure", 300, refund_object)
    )

    counts = statement_reconcile(day=_today())

    # Then the refund_failure line is the reversal's, never a charge line: the charge
    # and the refund keep their own lines, all three matched
    by_kind = {line.kind: line for line in StatementLine.objects.all()}
    assert set(by_kind) == {LineKind.CHARGE, LineKind.REFUND, LineKind.REFUND_FAILURE}
    failure = by_kind[LineKind.REFUND_FAILURE]
    assert (failure.provider_id, failure.reference, failure.amount) == (
        attempt.refund_id,
        attempt.refund_no,
        300,
    )
    assert {line.outcome for line in by_kind.values()} == {LineOutcome.MATCHED}
    assert by_kind[LineKind.CHARGE].amount == order.amount
    assert counts.asked == 1
    assert Refund.objects.get(pk=attempt.pk).status == "REVERSED"
    assert Order.objects.get(pk=order.pk).refunded_amount == 0
    _assert_clean()


# --- 5. Strays, whether or not we recorded them ------------------------------------------


def test_a_capture_whose_payment_row_was_lost_is_found_by_the_statement_and_refunded(
    stripe_proxy, stripe_shop, settings
):
    # Given a capture naming a reference of ours that no row of ours holds (lost)
    settings.RECONCILE_AFTER_S = 0
    lost = _captured_elsewhere(stripe_shop, 4200, {"out_trade_no": "P20261204LOSTROW0000001"})

    statement_reconcile(day=_today())

    # Then it was asked about by its own id, booked as a stray, and refunded at Stripe
    stray = StrayCapture.objects.get()
    assert (stray.trade_no, stray.out_trade_no, stray.amount) == (
        lost["id"],
        "P20261204LOSTROW0000001",
        4200,
    )
    assert stray.refund_status == "SUCCEEDED"
    refunds = emulator(stripe_shop).v1.refunds.list(params={"payment_intent": lost["id"]})
    assert [(r["amount"], r["metadata"]["out_refund_no"]) for r in refunds.data] == [
        (4200, stray.refund_no)
    ]
    assert StatementLine.objects.get(kind=LineKind.CHARGE).outcome == LineOutcome.STRAY
    _assert_clean()


def test_a_dashboard_charge_is_found_by_the_webhook_and_refunded(stripe_shop, settings):
    # Given a charge made in Stripe's dashboard: it names no reference of ours
    settings.RECONCILE_AFTER_S = 0
    made = _captured_elsewhere(stripe_shop, 990, {})
    body = _event("payment_intent.succeeded", made, "evt_dashboard", created=int(time.time()))

    answer = _post_event(body)

    assert (answer.status_code, answer.json()["outcome"]) == (200, "unmatched")
    # When the reconciler's pass asks Stripe about it (by its id): a stray, refunded
    pass_run_once()
    stray = StrayCapture.objects.get()
    assert (stray.trade_no, stray.out_trade_no, stray.refund_status) == (
        made["id"],
        "",
        "SUCCEEDED",
    )
    refunds = emulator(stripe_shop).v1.refunds.list(params={"payment_intent": made["id"]})
    assert [r["amount"] for r in refunds.data] == [990]
    assert ProviderNotification.objects.get(notify_id="evt_dashboard").resolved_at is not None
    _assert_clean()


def test_a_second_payment_intent_naming_our_reference_is_a_stray_refunded(
    stripe_shop, pay, order, settings
):
    # Given a paid order, and a second PaymentIntent naming its attempt's reference,
    # captured (a client retrying with a key of its own)
    settings.RECONCILE_AFTER_S = 0
    assert pay().status_code == 200
    payment = Payment.objects.get(order=order)
    second = _captured_elsewhere(
        stripe_shop, payment.amount, {"out_trade_no": payment.out_trade_no}
    )
    body = _event("payment_intent.succeeded", second, "evt_second", created=int(time.time()))

    # When its webhook arrives, and the reconciler asks Stripe about what it names
    assert _post_event(body).status_code == 200
    pass_run_once()

    # Then that capture is booked as a stray and refunded; ours is left alone
    stray = StrayCapture.objects.get()
    assert (stray.trade_no, stray.out_trade_no, stray.refund_status) == (
        second["id"],
        payment.out_trade_no,
        "SUCCEEDED",
    )
    client = emulator(stripe_shop)
    assert [
        r["amount"] for r in client.v1.refunds.list(params={"payment_intent": second["id"]}).data
    ] == [payment.amount]
    assert payment.trade_no is not None
    assert client.v1.refunds.list(params={"payment_intent": payment.trade_no}).data == []
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    row = ProviderNotification.objects.get(notify_id="evt_second")
    assert row.resolved_at is not None
    assert "second capture" in row.resolution
    _assert_clean()


def test_query_finds_an_intent_no_attempt_recorded_by_listing_where_there_is_no_search(
    stripe_shop,
):
    # localstripe has no search (404): the adapter lists PaymentIntents and reads their
    # metadata instead (Stripe's own search finds it there; see stripe.py)
    made = _captured_elsewhere(stripe_shop, 1500, {"out_trade_no": "P20261204UNRECORDED00001"})

    found = get_provider().query(out_trade_no="P20261204UNRECORDED00001")

    assert found is not None
    assert (found.status, found.trade_no, found.amount) == (ChargeStatus.SUCCESS, made["id"], 1500)


# --- Disputes -----------------------------------------------------------------------------


def _dispute(payment: Payment, status: str, *, reinstated: bool = False) -> dict[str, Any]:
    """A Dispute as Stripe documents it (its charge's PaymentIntent not expanded)."""
    movements = [{"id": "txn_dp_out", "object": "balance_transaction", "amount": -payment.amount}]
    if reinstated:
        movements.append(
            {"id": "txn_dp_back", "object": "balance_transaction", "amount": payment.amount}
        )
    return {
        "id": "dp_1",
        "object": "dispute",
        "amount": payment.amount,
        "currency": payment.currency.lower(),
        "charge": "ch_of_the_payment",
        "payment_intent": payment.trade_no,
        "reason": "fraudulent",
        "status": status,
        "created": int(time.time()),
        "balance_transactions": movements,
        "is_charge_refundable": False,
    }


def test_dispute_events_book_the_dispute_once_whatever_their_order(
    stripe_proxy, pay, order, client, settings
):
    settings.RECONCILE_AFTER_S = 0
    assert pay().status_code == 200
    payment = Payment.objects.get(order=order)
    stripe_proxy.disputes["dp_1"] = _dispute(payment, "lost")
    # Stripe's events for one dispute, delivered out of order and twice
    events = [
        ("charge.dispute.closed", _dispute(payment, "lost"), "evt_dp_closed"),
        ("charge.dispute.created", _dispute(payment, "needs_response"), "evt_dp_created"),
        ("charge.dispute.funds_withdrawn", _dispute(payment, "needs_response"), "evt_dp_out"),
    ]
    answers = [
        _post_event(_event(kind, obj, event_id, created=int(time.time())))
        for kind, obj, event_id in events + events[:1]
    ]

    assert {answer.status_code for answer in answers} == {200}
    dispute = Dispute.objects.get()
    assert (dispute.dispute_id, dispute.status, dispute.withdrawn, dispute.reinstated) == (
        "dp_1",
        "LOST",
        payment.amount,
        0,
    )
    assert LedgerEntry.objects.filter(dispute=dispute).count() == 1
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    refused = client.post(
        f"/api/v1/orders/{order.number}/refunds/",
        {},
        format="json",
        headers={"Idempotency-Key": new_key()},
    )
    assert (refused.status_code, refused.json()["code"]) == (409, "order-not-refundable")
    # Closed before anyone needed telling: no case; the books and Stripe agree
    pass_run_once()
    assert not Case.objects.filter(kind=CaseKind.DISPUTE, state="open").exists()
    _assert_clean()


def test_a_dispute_won_is_withdrawn_then_reinstated_and_its_lines_match(
    stripe_proxy, pay, order, settings
):
    settings.RECONCILE_AFTER_S = 0
    assert pay().status_code == 200
    payment = Payment.objects.get(order=order)
    # Given a dispute open (its case opens), then won, the money back
    stripe_proxy.disputes["dp_1"] = _dispute(payment, "needs_response")
    created = _event("charge.dispute.created", _dispute(payment, "needs_response"), "evt_1")
    assert _post_event(created).status_code == 200
    pass_run_once()
    [case] = Case.objects.filter(kind=CaseKind.DISPUTE)
    assert case.state == "open"
    won = _dispute(payment, "won", reinstated=True)
    stripe_proxy.disputes["dp_1"] = won
    intent = {"id": payment.trade_no, "metadata": {"out_trade_no": payment.out_trade_no}}
    stripe_proxy.transactions += [
        _transaction("adjustment", "dispute", -payment.amount, {**won, "payment_intent": intent}),
        _transaction(
            "adjustment", "dispute_reversal", payment.amount, {**won, "payment_intent": intent}
        ),
    ]

    # When the statement lists both movements (the events of its close were lost)
    counts = statement_reconcile(day=_today())
    pass_run_once()

    # Then the dispute is WON, each movement booked once, each line matched
    dispute = Dispute.objects.get()
    assert (dispute.status, dispute.withdrawn, dispute.reinstated) == (
        "WON",
        payment.amount,
        payment.amount,
    )
    lines = StatementLine.objects.filter(
        kind__in=[LineKind.DISPUTE_WITHDRAWAL, LineKind.DISPUTE_REINSTATEMENT]
    )
    assert {(line.kind, line.provider_id, line.outcome) for line in lines} == {
        (LineKind.DISPUTE_WITHDRAWAL, "dp_1", LineOutcome.MATCHED),
        (LineKind.DISPUTE_REINSTATEMENT, "dp_1", LineOutcome.MATCHED),
    }
    assert counts.asked == 1
    case.refresh_from_db()
    assert case.state == "resolved"
    _assert_clean()


def test_the_statement_parses_stripes_kinds_of_balance_transaction():
    # The line a balance transaction becomes, on Stripe's documented shapes
    intent = {"id": "pi_1", "metadata": {"out_trade_no": "P1"}}
    refund = {"id": "re_1", "object": "refund", "metadata": {"out_refund_no": "R1"}}
    dispute = {"id": "dp_1", "object": "dispute", "payment_intent": intent}
    cases = [
        (
            _transaction("charge", "charge", 100, {"object": "charge", "payment_intent": intent}),
            (StatementKind.CHARGE, "pi_1", "P1"),
        ),
        (
            _transaction("payment", "charge", 100, {"object": "charge", "payment_intent": intent}),
            (StatementKind.CHARGE, "pi_1", "P1"),
        ),
        (
            _transaction("payment_refund", "refund", -100, refund),
            (StatementKind.REFUND, "re_1", "R1"),
        ),
        (
            _transaction("refund_failure", "refund_failure", 100, refund),
            (StatementKind.REFUND_FAILURE, "re_1", "R1"),
        ),
        (
            _transaction("adjustment", "refund_failure", 100, refund),
            (StatementKind.REFUND_FAILURE, "re_1", "R1"),
        ),
        (
            _transaction("adjustment", "dispute", -100, dispute),
            (StatementKind.DISPUTE_WITHDRAWAL, "dp_1", "P1"),
        ),
        (
            _transaction("adjustment", "dispute_reversal", 100, dispute),
            (StatementKind.DISPUTE_REINSTATEMENT, "dp_1", "P1"),
        ),
        (
            _transaction("payout", "payout", -100, {"id": "po_1", "object": "payout"}),
            (StatementKind.OTHER, None, "payout"),
        ),
        (
            _transaction("refund", "refund", -100, {"id": "x", "object": "transfer_reversal"}),
            (StatementKind.OTHER, None, "refund"),
        ),
    ]
    for txn, (kind, provider_id, reference) in cases:
        entry = stripe_statement.statement_entry(json.loads(json.dumps(txn)), line=2)
        assert (entry.kind, entry.reference, entry.amount) == (kind, reference, 100), txn
        assert entry.provider_id == (provider_id or txn["id"])
