"""OnceShop's benchmarks: ``make bench`` (``python -m tools.bench``), explained in
docs/benchmarks.md.

The harness: ``__main__`` (the command, the suites), ``standalone`` (setting up a
run; one suite alone), ``context``, ``appserver`` (gunicorn as deployed),
``harness`` (keep-alive clients, the measured window), ``inprocess`` (one request
in this process), ``fixtures``, ``database``, ``stats``, ``markdown``, ``report``.
One file per suite: ``orders`` (``keylayer``: its instruction counter, run under
valgrind), ``pay``, ``callbacks``, ``peers`` (``peer_settings``), ``reconcile_pass``,
``statement``, ``reaper``. Results go to ``tools/bench/out/``.
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: manage.py, config/, tests/

# The bench is a harness like the tests (tests/settings.py): the demo profile, with
# the sandbox provider served by its app servers. Set before anything loads the
# settings, and inherited by every process it starts (migrate, gunicorn).
os.environ.setdefault("DEMO_MODE", "true")
os.environ.setdefault("SANDBOX_ENABLED", "true")
