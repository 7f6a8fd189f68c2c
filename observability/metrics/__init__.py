"""Prometheus metrics: ``instruments`` (counted where things happen), ``gauges`` (read
at scrape time), ``exposition`` (``/metrics`` and the worker's endpoint), ``multiproc``."""
