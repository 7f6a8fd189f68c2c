"""A process that dies half-way through a request.

Experiment 6 forks a child process per variant; the child runs the variant's
first request on its own database connection and kills itself with SIGKILL at
the worst moment — no exception handler, no ``finally``, no rollback sent by
the client: PostgreSQL sees a connection vanish, exactly as when a server is
killed by the OOM killer. The parent then sends the retry.

Forked rather than started afresh: the child inherits the loaded Django, so a
crash costs milliseconds instead of seconds of imports.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection, connections

CRASH_TIMEOUT_S = 60.0
_RECORD_WRITES = ('INSERT INTO "idempotency_idempotencykey"', 'UPDATE "idempotency_idempotencykey"')


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_before_the_record_is_written(execute: Any, sql: str, *args: Any) -> Any:
    """A database hook: die as the phase is about to write the key's outcome.

    By then the phase has inserted the order, its lines and its stock reservation,
    in the same transaction, which is still open: the crash leaves it uncommitted.
    """
    # An order's record is inserted finished, with its answer, after the order; a
    # two-phase flow's record is updated at the end of its phase.
    if sql.startswith(_RECORD_WRITES):
        die()
    return execute(sql, *args)


@dataclass(frozen=True)
class Crash:
    name: str
    request: Callable[[], object]  # runs in the child, which must die inside it
    hook: Callable[..., Any] | None = None  # a database execute wrapper, if any


def _child(crash: Crash) -> None:
    if crash.hook is None:
        crash.request()
    else:
        with connection.execute_wrapper(crash.hook):
            crash.request()
    raise SystemExit(f"{crash.name}: the crash point was never reached")


def crash_all(crashes: list[Crash]) -> None:
    """Run each crash in its own forked process, side by side; return once all died.

    Raises if one did not die by SIGKILL (it failed before its crash point).
    """
    # The children must open their own connections: close ours, so none is shared.
    connections.close_all()
    fork = multiprocessing.get_context("fork")
    children = [fork.Process(target=_child, args=(crash,), daemon=True) for crash in crashes]
    for child in children:
        child.start()
    for crash, child in zip(crashes, children, strict=True):
        child.join(CRASH_TIMEOUT_S)
        if child.exitcode != -signal.SIGKILL:
            raise RuntimeError(f"{crash.name} did not die by SIGKILL: exit {child.exitcode}")
