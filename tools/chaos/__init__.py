"""Chaos at scale: a real deployment, customers, a nemesis, and a history check.

``make chaos`` (``python -m tools.chaos``) starts OnceShop as it is deployed — two
shop gunicorns, the provider's gunicorn, two Celery workers and beat, on
PostgreSQL and a Redis of its own — on loopback. Customers follow the
published key discipline (``onceshop_client``) and every request they send is
written to a history (JSON lines). Meanwhile a nemesis, scheduled from a seed,
SIGKILLs servers and workers, restarts Redis, terminates database backends and
arms the provider's faults. Then everything is restarted and left to quiesce,
and the checker compares what every customer was told with the books
(Jepsen's approach) and runs ``manage.py audit``. docs/reliability.md has the
figures of a real run and what the run does not cover.

The app never imports this package. The run has its own database
(``<your database>_chaos``, recreated every time) and its own Redis.
"""
