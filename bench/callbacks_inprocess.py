"""A provider notification inside the bench process: its SQL, and where its time goes.

Notifications go through Django's test ``Client`` (middleware, DRF, the
signature check, the ingest service) one at a time on the bench database, with
no gunicorn and no socket: the cost of one request, away from concurrency and
from the noise of a shared machine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter

from django.test import Client

from bench.context import Section
from bench.inprocess import QueryCount, count_queries, ms_per_call
from bench.phases import Probe, Stopwatch, Timed, phase_rows, phase_section

VERIFY = "signature check and parse (verify_notification)"
INGEST = "ingest: notify_id lookup, then one transaction up to COMMIT"
SETTLE = "settle: payment SUCCEEDED, ledger entry, order PAID (payment_settle)"
ENQUEUE = "fulfilment task enqueued on commit (Celery LPUSH to Redis)"

# Headers for a body: the signature is computed per request, as the sandbox signs
# every delivery attempt afresh.
Signer = Callable[[bytes], Mapping[str, str]]


def callback_poster(*, path: str, signed: Signer) -> Callable[[bytes], None]:
    """POST one signed notification in this process; anything but 200 is a broken set-up."""
    client = Client()

    def post(body: bytes) -> None:
        response = client.post(
            path, body, content_type="application/json", headers=dict(signed(body))
        )
        if response.status_code != 200:
            raise RuntimeError(f"in-process callback: {response.status_code} {response.content!r}")

    return post


def callback_probes() -> list[Probe]:
    from celery.app.task import Task

    from callbacks import api, services
    from payments.providers.sandbox import SandboxProvider

    return [
        Probe(SandboxProvider, "verify_notification", VERIFY),
        Probe(api, "callback_ingest", INGEST),
        Probe(services, "payment_settle", SETTLE),
        Probe(Task, "apply_async", ENQUEUE),  # only fulfil_order is sent in this process
    ]


@dataclass(frozen=True)
class InProcess:
    fresh_sql: QueryCount
    duplicate_sql: QueryCount
    fresh: Timed  # fresh notifications, one at a time, by phase
    duplicate_ms: float


def in_process(bodies: Sequence[bytes], *, path: str, signed: Signer) -> InProcess:
    """SQL of a fresh notification and of its duplicate, then fresh ones timed by phase.

    ``bodies``: notifications for distinct PENDING attempts; a warm-up, the
    counted one (then re-sent as the counted duplicate), one per timed request.
    """
    post = callback_poster(path=path, signed=signed)
    post(bodies[0])  # connection open, caches filled
    fresh_sql = count_queries(lambda: post(bodies[1]))
    duplicate_sql = count_queries(lambda: post(bodies[1]))
    timed = bodies[2:]
    stopwatch = Stopwatch()
    with stopwatch.probing(callback_probes()):
        started = perf_counter()
        for body in timed:
            post(body)
        total = perf_counter() - started
    return InProcess(
        fresh_sql=fresh_sql,
        duplicate_sql=duplicate_sql,
        fresh=Timed(iterations=len(timed), total_s=total, seconds=dict(stopwatch.seconds)),
        duplicate_ms=ms_per_call(lambda: post(bodies[1]), len(timed)),
    )


def phases_section(fresh: Timed) -> Section:
    rows = phase_rows(
        fresh.seconds,
        phases=[VERIFY, INGEST],
        nested=[SETTLE, ENQUEUE],
        remainder="rest (Django and DRF request handling, rendering)",
        total_s=fresh.total_s,
        iterations=fresh.iterations,
    )
    return phase_section(
        f"Where a fresh notification spends its time ({fresh.iterations}, in-process)",
        "One notification at a time through Django's test client in the bench process. "
        "Wall time inside the view's functions, wrapped in the bench process (the app is "
        "unchanged); rows marked `-` lie inside the ingest above them.",
        rows,
        fresh.ms_per_request,
    )
