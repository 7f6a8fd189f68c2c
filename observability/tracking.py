"""Light-touch instrumentation: one call or decorator at each place things happen.

- ``idempotent_request``: what the Idempotency-Key layer did with a request;
- ``payments.providers.observed.provider_call`` (next to what it observes): every
  call to the payment provider;
- ``reconcile_job``: every periodic job run (duration, counts, heartbeat).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from edge.errors import ApplicationError
from observability import heartbeats
from observability.metrics import instruments


def _outcome_of(code: str) -> str:
    if code == "idempotency-key-in-use":
        return "in_use"
    if code == "idempotency-key-mismatch":
        return "mismatch"
    # 503 `payment-outcome-unknown` (and its refund twin): left at its recovery point.
    return "unknown" if code.endswith("-outcome-unknown") else "error"


@contextmanager
def idempotent_request(*, route: str) -> Iterator[Callable[[bool], None]]:
    """``with idempotent_request(route=...) as done: ...; done(outcome.replayed)``."""
    outcomes = instruments.IDEMPOTENCY_OUTCOMES

    def done(replayed: bool) -> None:
        outcomes.labels(route=route, outcome="replayed" if replayed else "fresh").inc()

    try:
        yield done
    except ApplicationError as error:
        # By the stable codes (docs/design.md), so this layer needs no app's classes.
        outcomes.labels(route=route, outcome=_outcome_of(error.code)).inc()
        raise
    except Exception:
        outcomes.labels(route=route, outcome="error").inc()
        raise


def lock_taken_over() -> None:
    instruments.IDEMPOTENCY_TAKEOVERS.inc()


class _Job(Protocol):
    name: str


def reconcile_job(
    run: Callable[[Any], dict[str, Any] | None],
) -> Callable[[Any], dict[str, Any] | None]:
    """Wrap ``job_run(job)``: its duration, outcome, counts and success heartbeat."""

    @functools.wraps(run)
    def observed(job: _Job) -> dict[str, Any] | None:
        started = time.perf_counter()
        try:
            counts = run(job)
        except Exception:
            instruments.RECONCILE_RUNS.labels(job=job.name, outcome="error").inc()
            raise
        finally:
            instruments.RECONCILE_DURATION.labels(job=job.name).observe(
                time.perf_counter() - started
            )
        if counts is None:
            instruments.RECONCILE_RUNS.labels(job=job.name, outcome="skipped").inc()
            return None
        instruments.RECONCILE_RUNS.labels(job=job.name, outcome="ok").inc()
        for result, value in counts.items():
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                instruments.RECONCILE_ITEMS.labels(job=job.name, result=result).inc(value)
        heartbeats.job_succeeded(job=job.name)
        return counts

    return observed
