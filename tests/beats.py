"""Real ``celery beat`` processes sending the product's periodic tasks to the tests' queue.

Each beat keeps its own schedule file, as each node of ``make cluster`` does; what it
sent is read back from that file (``total_run_count``, kept by beat itself) once it
stopped. The schedule is the product's entries at the test's pace (tests/beat_settings.py).
"""

from __future__ import annotations

import os
import shelve
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.processes import ROOT, child_database_url
from tests.workers import TEST_QUEUE

# A beat stops within this long of SIGTERM (it saves its schedule file first).
BEAT_STOP_TIMEOUT_S = 20


class Beat:
    """One beat process, its schedule file and its log (for a failure's message only)."""

    def __init__(self, *, schedule: Path, jobs: list[str], every_s: float) -> None:
        self.schedule = schedule
        self.log: list[str] = []
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "celery", "-A", "config.celery:app", "beat"),
                *("--schedule", str(schedule), "--loglevel", "INFO"),
            ],
            cwd=ROOT,
            env={
                **os.environ,
                "DATABASE_URL": child_database_url(),
                "CELERY_QUEUE": TEST_QUEUE,
                "DJANGO_SETTINGS_MODULE": "tests.beat_settings",
                "TEST_BEAT_JOBS": ",".join(jobs),
                "TEST_BEAT_EVERY_S": str(every_s),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read_log, daemon=True).start()

    def _read_log(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append(line.rstrip())

    def stop(self) -> None:
        """SIGTERM, as an orchestrator stops it: beat saves its schedule file, then exits."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=BEAT_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def sent(self, entry: str) -> int:
        """How many times this beat sent ``entry`` (read from its file: stop it first)."""
        assert self.process.poll() is not None, "a running beat's file is not saved yet"
        # The file is the one this test's own beat wrote (shelve: pickles of its entries).
        with shelve.open(str(self.schedule), flag="r") as store:  # noqa: S301
            return int(store["entries"][entry].total_run_count)
