"""The operations' tests plant their cases with the reconciler's fixtures
(tests/reconcile/conftest.py): the operations run on the core, so do their tests."""

from tests.reconcile.conftest import due_at_once, gone_provider  # noqa: F401
