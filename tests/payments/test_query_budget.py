"""The cost of the pay phases in SQL statements, printed and pinned."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import new_key

pytestmark = pytest.mark.django_db(transaction=True)

# One pay, as production runs it. Beyond authentication with the key lookup (one
# statement, fastpaths/replay.py):
#   the order's earlier failed attempts (none here: asked about before a new one),
#   phase 1 (BEGIN, insert key, the services' savepoints, lock order, insert
#   payment, move key, COMMIT),
#   read the attempt before calling the provider (outside any transaction),
#   phase 2 (BEGIN, savepoint, read payment, settle: payment UPDATE, ledger INSERT,
#   order read + conditional UPDATE, read back the order with lines, payments and
#   refunds for the answer, finish key, COMMIT). No savepoint of the key layer's
#   own around either phase's work (idempotency/core.py: a final error rolls the
#   phase back whole and is stored in a transaction of its own).
PAY_QUERIES = 27
REPLAY_QUERIES = 1  # the token with the key record (fastpaths/replay.py)


def test_pay_query_count_does_not_creep(pay):
    key = new_key()
    with CaptureQueriesContext(connection) as first:
        assert pay(key).status_code == 200
    with CaptureQueriesContext(connection) as replay:
        assert pay(key).status_code == 200

    print(f"pay: {len(first)} queries; replay: {len(replay)} queries")
    assert len(first) == PAY_QUERIES, "\n".join(q["sql"][:100] for q in first)
    assert len(replay) == REPLAY_QUERIES
