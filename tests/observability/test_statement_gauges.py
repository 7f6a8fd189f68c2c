"""The statement's gauges: open discrepancies and stray captures not refunded, as a
scrape reads them, moving with the statement's work and its resolution."""

from __future__ import annotations

import pytest

from operations.statements.discrepancies import discrepancy_resolve
from operations.statements.importing import statement_reconcile
from operations.statements.models import StatementDiscrepancy
from payments.models import LedgerEntry
from reconcile.models import StrayCapture
from tests.factories import UserFactory
from tests.observability.conftest import value
from tests.operations.statements.helpers import stray_charge, today

pytestmark = pytest.mark.django_db(transaction=True)

OPEN = "onceshop_statement_discrepancies_open"
STRAY = "onceshop_stray_captures_unrefunded"


@pytest.fixture(autouse=True)
def due_at_once(settings) -> None:
    settings.RECONCILE_AFTER_S = 0


def test_an_open_discrepancy_is_counted_until_staff_resolve_it(scrape, paid_order):
    # Given our ledger says another amount than the provider settled
    LedgerEntry.objects.update(amount=paid_order.amount + 1)

    # When the day's statement is reconciled
    statement_reconcile(day=today())

    # Then one discrepancy is open, and aging
    during = scrape()
    assert value(during, OPEN) == 1
    assert value(during, f"{OPEN}_oldest_age_seconds") > 0

    # When staff resolve it with a note, the gauge is back to zero
    staff = UserFactory.create(is_staff=True)
    assert discrepancy_resolve(
        discrepancy_id=StatementDiscrepancy.objects.get().pk, user_id=staff.pk, note="checked"
    )
    after = scrape()
    assert (value(after, OPEN), value(after, f"{OPEN}_oldest_age_seconds")) == (0, 0)


def test_a_stray_capture_is_counted_while_it_is_not_refunded(scrape, fault, user, sandbox):
    # Given a capture for no attempt of ours, refunded when the statement finds it
    stray_charge(user)
    statement_reconcile(day=today())
    assert value(scrape(), STRAY) == 0

    # When another one's refund is declined by the provider
    stray_charge(user, amount=555)
    fault("decline", target="refund")
    statement_reconcile(day=today())

    # Then that one is a stray capture not refunded: what OrphanedCaptureNotRefunded bounds
    assert StrayCapture.objects.exclude(refund_status="SUCCEEDED").count() == 1
    during = scrape()
    assert value(during, STRAY) == 1
    assert value(during, f"{STRAY}_oldest_age_seconds") > 0
