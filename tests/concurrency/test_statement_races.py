"""The daily statement imported exactly once (docs/design.md, "Statements"), whatever fires it:
three importers at once, a rerun, a process killed half-way and a retry.

One import row per (provider, day) and each line once are unique constraints;
the matching resumes at the lines still pending; the provider-facing writes
(a stray capture's refund, an orphaned capture) happen once at the provider.
Real threads and real processes against PostgreSQL and the live sandbox.
"""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from demo.sandbox.models import Charge
from demo.sandbox.models import Refund as SandboxRefund
from operations.statements import jobs as statement_jobs
from operations.statements import tasks
from operations.statements.importing import statement_reconcile
from operations.statements.models import LineOutcome, StatementImport, StatementLine
from orders.models import Order, Product
from payments.models import LedgerEntry, Payment
from payments.services import payment_create, payment_mark_unknown
from reconcile.models import StrayCapture
from tests.concurrency.helpers import run_at_once
from tests.conftest import new_key
from tests.operations.statements.helpers import (
    charge_at_provider,
    statement_findings,
    stray_charge,
    today,
)
from tests.processes import run_django

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.usefixtures("due_at_once"),
]


@pytest.fixture
def due_at_once(settings) -> None:
    """Attempts are due for reconciliation at once (no request is in flight here)."""
    settings.RECONCILE_AFTER_S = 0


def new_order(client: APIClient, product: Product) -> str:
    response = client.post(
        "/api/v1/orders/",
        {"lines": [{"sku": product.sku, "quantity": 1}]},
        format="json",
        headers={"Idempotency-Key": new_key()},
    )
    assert response.status_code == 201
    return str(response.json()["number"])


@pytest.fixture
def busy_day(client, product, user, pay, refund, sandbox) -> dict[str, Any]:
    """Three paid orders (one partly refunded), a capture of another amount for an
    attempt left unknown, and a capture of a reference we hold no attempt for."""
    numbers = [new_order(client, product) for _ in range(3)]
    for number in numbers:
        assert pay(number=number).status_code == 200
    assert refund(number=numbers[0], body={"amount": 100}).status_code == 200
    unknown = payment_create(user_id=user.pk, order_number=new_order(client, product))
    payment_mark_unknown(payment_id=unknown.pk)
    charge_at_provider(unknown, amount=unknown.amount + 7)
    stray, _ = stray_charge(user)
    return {"stray": stray, "unknown": unknown.pk}


def assert_imported_once(day: dict[str, Any]) -> None:
    # One import, each line of the provider's day once, none left pending
    assert StatementImport.objects.count() == 1
    on_statement = (
        Charge.objects.filter(status="SUCCESS").count()
        + SandboxRefund.objects.filter(status="SUCCESS").count()
    )
    assert StatementLine.objects.count() == on_statement
    assert not StatementLine.objects.filter(outcome=LineOutcome.PENDING).exists()
    # Each provider-facing write once: the stray refunded once, the orphan booked once
    assert SandboxRefund.objects.filter(charge__out_trade_no=day["stray"]).count() == 1
    assert StrayCapture.objects.get().refund_status == "SUCCEEDED"
    assert Payment.objects.get(pk=day["unknown"]).status == "ORPHANED"
    assert LedgerEntry.objects.filter(kind="orphan_capture").count() == 1
    assert LedgerEntry.objects.filter(kind="capture").count() == 3
    assert Order.objects.filter(status="PAID").count() == 3
    assert statement_findings() == []


def test_three_importers_at_once_and_a_rerun_import_once(busy_day):
    # When three importers (three beat instances, no lock between them) fire together
    results = run_at_once(3, lambda _: statement_reconcile(day=today(), batch_size=2))

    # Then the lines they added add up to one import's, and a rerun adds nothing
    first_download = min(r.downloaded for r in results)
    # (+ 1: the stray capture's refund, on the day's statement once it was made)
    assert sum(r.new_lines for r in results) in (first_download, first_download + 1)
    rerun = statement_reconcile(day=today())
    assert_imported_once(busy_day)
    assert rerun.asked == 0  # nothing left to ask the provider about
    assert rerun.new_lines == rerun.stray  # at most the stray's refund, matched at once
    assert StatementImport.objects.get().downloads == 4


def test_the_beat_task_fired_three_times_at_once_and_again_imports_once(busy_day, monkeypatch):
    # Given beat's daily task for a day (here: the busy day), fired by three beats at once
    monkeypatch.setattr(statement_jobs, "yesterday", today)
    results = run_at_once(3, lambda _: tasks.reconcile_statement())
    # (the single-runner lock spares the others the download; it is not what makes it once)
    assert any(result is not None for result in results)

    # and once more the next time it fires
    assert tasks.reconcile_statement() is not None

    assert_imported_once(busy_day)


# Where the importer's process is killed (os._exit, as SIGKILL would: no cleanup):
# (SQL it dies at, which occurrence, before or after it ran). "READ 3": after the
# third line came off the download, in the middle of the COPY.
CRASHES = {
    # half-way through the download: the import's transaction rolls back whole
    "mid-download": ("READ", 3, "after"),
    # every line written, the transaction not committed yet
    "lines-written-not-committed": ("INSERT INTO reconcile_statementline", 1, "after"),
    # after the first matching statement committed: the rest of the lines pending
    "mid-matching": ("WITH settled AS", 1, "after"),
    # the provider refunded the stray capture, we had not recorded it yet
    "refund-sent-not-recorded": ('UPDATE "reconcile_straycapture"', 1, "before"),
}


@pytest.mark.parametrize(("sql", "nth", "when"), CRASHES.values(), ids=CRASHES.keys())
def test_a_process_killed_half_way_then_a_retry_imports_once(busy_day, settings, sql, nth, when):
    # Given an importer process killed at that point
    child = run_django(
        env={
            "PROVIDER_BASE_URL": settings.PROVIDER_BASE_URL,
            "SHOP_BASE_URL": settings.SHOP_BASE_URL,
            "RECONCILE_AFTER_S": "0",
        },
        code=f"""
        import os
        from datetime import date
        from django.db import connection
        from payments.providers import get_provider
        from operations.statements.importing import statement_reconcile

        seen = 0

        def die(execute, sql, params, many, context):
            global seen
            if sql.lstrip().startswith({sql!r}):
                seen += 1
                if seen == {nth} and {when!r} == "before":
                    os._exit(137)
            result = execute(sql, params, many, context)
            if seen == {nth} and sql.lstrip().startswith({sql!r}):
                os._exit(137)
            return result

        class Dying:
            # The real provider; the process dies while its statement streams in.
            def __init__(self, real):
                self.real = real

            def __getattr__(self, name):
                return getattr(self.real, name)

            def statement(self, *, day):
                for read, entry in enumerate(self.real.statement(day=day), start=1):
                    yield entry
                    if {sql!r} == "READ" and read == {nth}:
                        os._exit(137)

        with connection.execute_wrapper(die):
            statement_reconcile(
                day=date.fromisoformat("{today()}"), provider=Dying(get_provider()), batch_size=2
            )
        """,
    )
    assert child.returncode == 137, child.stderr
    if sql in ("READ", "INSERT INTO reconcile_statementline"):
        assert StatementLine.objects.count() == 0  # nothing half-imported
    else:
        assert StatementLine.objects.filter(outcome=LineOutcome.PENDING).exists()

    # When the import runs again (a retry, then the next day's rerun)
    statement_reconcile(day=today(), batch_size=2)
    statement_reconcile(day=today(), batch_size=2)

    # Then every line once, the matching complete, each provider write once
    assert_imported_once(busy_day)
