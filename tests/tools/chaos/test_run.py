"""A tiny real chaos run: the whole deployment, every kind of fault, and a clean check.

``python -m tools.chaos`` as a user runs it, in its own database and directory, with
the nemesis at four times its usual pace so that every kind strikes at least
once (the nemesis does not stop before its first round is over). The
checker's verdict is the exit code; the history shows what was done.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from tests.processes import ROOT
from tools.bench.database import database_name
from tools.chaos.history import history_read
from tools.chaos.nemesis import WEIGHTS

pytestmark = [pytest.mark.slow]

RUN_TIMEOUT_S = 400


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_a_short_run_through_every_kind_of_fault_ends_with_no_violation(tmp_path):
    server_url = os.environ["DATABASE_URL"]
    argv = [
        "-m",
        "tools.chaos",
        "--orders",
        "300",
        "--clients",
        "8",
        "--pace",
        "0.25",
        "--seed",
        "12",
    ]
    argv += ["--out", str(tmp_path), "--database", f"{database_name(server_url)}_chaos_ci"]

    # As a user runs it: the app's own settings, not the tests' profile.
    env = {name: value for name, value in os.environ.items() if name != "DJANGO_SETTINGS_MODULE"}

    run = subprocess.Popen(
        [sys.executable, *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        output, _ = run.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        run.terminate()  # SIGTERM: the run stops the processes it started
        output, _ = run.communicate(timeout=60)

    assert run.returncode == 0, output.decode()[-8000:]
    events = history_read(tmp_path / "history.jsonl")
    struck = Counter(e["kind"] for e in events if e["type"] == "nemesis" and "missed" not in e)
    assert set(struck) == set(WEIGHTS), struck
    assert sum(1 for e in events if e["type"] == "intent" and e["op"] == "pay") > 0
    assert "violations: **0**" in (tmp_path / "report.md").read_text()
