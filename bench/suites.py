"""The registry: every suite ``make bench`` runs, in order.

Adding a scenario group (e.g. a reconcile pass, the reaper) means writing
``bench/<name>.py`` with ``SUITE = Suite(name, title, run)`` and adding it to
this list; the runner and the report need no change.

Importing this module imports Django models: only after ``django.setup()``.
"""

from __future__ import annotations

from bench import callbacks, orders, pay, peers, reaper, reconcile_pass, statement
from bench.context import Suite

SUITES: list[Suite] = [
    orders.SUITE,
    pay.SUITE,
    callbacks.SUITE,
    peers.SUITE,
    # The two slow ones last: 10,000 unknown attempts, then a million expired keys.
    reconcile_pass.SUITE,
    statement.SUITE,
    reaper.SUITE,
]


def select(names: tuple[str, ...]) -> list[Suite]:
    """The suites named (all of them when none is), in registry order."""
    known = {suite.name for suite in SUITES}
    if unknown := sorted(set(names) - known):
        raise SystemExit(f"unknown suite(s) {unknown}; known: {sorted(known)}")
    return [suite for suite in SUITES if not names or suite.name in names]
