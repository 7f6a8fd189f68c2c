"""The fast paths are tested on the reconciler's own fixtures: attempts left unknown
the quick way, and a reconciler that takes them at once."""

from tests.reconcile.conftest import due_at_once, unknown_payment  # noqa: F401
