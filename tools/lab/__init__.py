"""The anti-pattern lab: each classic idempotency mistake, run and counted.

``make lab`` (``python -m tools.lab``; ``make lab EXP=5`` runs one) runs ten
experiments. Each puts a small, deliberately naive implementation next to
OnceShop's own code path, runs both under the same conditions against the real
PostgreSQL and Redis, and reports what the database holds afterwards — orders,
debits, rows — never what the code is supposed to do. docs/lab.md explains
each one and links the production code that avoids the mistake.

The app never imports this package. The lab runs in a scratch database of its
own (``<your database>_lab``, recreated and migrated on every run), with its own
Celery queue nobody consumes, so it never touches the demo's data.
"""
