"""Operating OnceShop: health probes, Prometheus metrics, and logs that follow one payment.

- ``context``: the log context of the current request or task (request id, user,
  key hash, order number, out_trade_no), in contextvars;
- ``logs``: the JSON (or plain) formatter that writes that context on every line;
- ``middleware``: request ids, the access line and the request metrics;
- ``health``: ``/healthz`` and ``/readyz``;
- ``metrics/``: the instruments, the scrape-time gauges and ``/metrics``;
- ``celery``: the request id across the queue, task metrics, worker metrics;
- ``heartbeats``: when the audit and the reconcile jobs last ran (in Redis).

Infrastructure, like ``config/`` (not a Django app): it imports ``config`` only,
never an app, so every layer may use it; apps register their own gauges
(``payments/apps.py``) and observe their own calls (``payments/providers/observed.py``).
See docs/operating.md for what to watch and what to do.
"""
