"""OnceShop's benchmarks: ``make bench`` (``python -m bench``).

Everything runs on this machine against real services: gunicorn as deployed,
PostgreSQL (a dedicated ``onceshop_bench`` database, recreated each run) and
Redis. Modules:

- ``__main__``: options, set-up (database, Django, bench user), the run, the report;
- ``suites``: the registry, one entry per scenario group (``orders`` today);
- ``orders``: order creation first-time / replay / layer off over HTTP, the figures;
- ``orders_sql``: the same writes as one raw SQL transaction (the pgbench script);
- ``orders_inprocess``: the SQL, service time and profile of one order request;
- ``appserver``: gunicorn start/stop, its environment and CPU use;
- ``harness``: the keep-alive load generator and the measured window;
- ``pgsessions``: what the database sessions do during a scenario;
- ``pgbench``: run a pgbench script and read its figures;
- ``inprocess`` and ``profiling``: Django in this process, query counts, pyinstrument;
- ``stats``, ``markdown``, ``report``: figures and their presentation.

Results go to ``bench/out/`` (git-ignored); docs/benchmarks.md explains them.
"""

import os

# The bench is a harness like the tests (tests/settings.py): the demo profile, with
# the sandbox provider served by its app servers. Set before anything loads the
# settings, and inherited by every process it starts (migrate, gunicorn).
os.environ.setdefault("DEMO_MODE", "true")
os.environ.setdefault("SANDBOX_ENABLED", "true")
