"""prometheus-client's multiprocess mode: one directory of counter files per process family.

Every gunicorn worker (and every Celery pool process) writes its counters to
files in ``PROMETHEUS_MULTIPROC_DIR``; a scrape sums them, so it does not
matter which worker answers. The library reads the variable when it is first
imported, so it comes from the environment (Dockerfile, compose, ``make demo``),
never from a Django setting. Unset (tests, ``runserver``): one process, in memory.

The directory belongs to one process family (the web server, or one Celery
worker) and is emptied when that family starts (gunicorn's ``on_starting``,
Celery's ``worker_init``): files of an earlier run would otherwise be summed in.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ENV = "PROMETHEUS_MULTIPROC_DIR"


def directory() -> Path | None:
    raw = os.environ.get(ENV, "")
    return Path(raw) if raw else None


def ensure_directory() -> None:
    """Create the directory if the environment names one (a ``manage.py`` run before the
    server's first start writes its counters there too)."""
    path = directory()
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)


def reset_directory() -> None:
    """Empty the directory: called once by the family's parent, before any child exists."""
    path = directory()
    if path is None:
        return
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)


def mark_dead(pid: int) -> None:
    """A child exited: drop its live-gauge files (its counters stay: they were counted)."""
    if directory() is None:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)
