"""OnceShop's benchmarks: ``make bench`` (``python -m bench``); docs/benchmarks.md explains them.

The harness: ``__main__`` (the command and its suites), ``standalone`` (setting
up a run; one suite alone), ``context`` (what a suite gets and returns),
``appserver`` (gunicorn as deployed), ``harness`` (keep-alive clients, the
measured window, the database's sessions), ``inprocess`` (Django in this
process: SQL counts, timings, phases), ``fixtures`` (rows the suites need),
``database``, ``stats``, ``markdown`` and ``report``.

One file per suite: ``orders``, ``pay``, ``callbacks``, ``peers``,
``reconcile_pass``, ``statement``, ``reaper``; ``keylayer`` is the order suite's
instruction counter (it runs under valgrind in a process of its own) and
``peer_settings`` the peers' Django settings. Results go to ``bench/out/``.
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout: manage.py, config/, tests/

# The bench is a harness like the tests (tests/settings.py): the demo profile, with
# the sandbox provider served by its app servers. Set before anything loads the
# settings, and inherited by every process it starts (migrate, gunicorn).
os.environ.setdefault("DEMO_MODE", "true")
os.environ.setdefault("SANDBOX_ENABLED", "true")
