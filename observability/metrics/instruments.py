"""The counters and histograms, and the one function per event that moves them.

Label values are always from small fixed sets (route names, operation names,
outcomes, task names): never a path, an id or a key, which would make one time
series per request.
"""

from __future__ import annotations

from observability.metrics.multiproc import ensure_directory

ensure_directory()  # before the first metric value touches the directory

from prometheus_client import Counter, Histogram, disable_created_metrics  # noqa: E402

# `_created` series double the output and no alert or panel here reads them.
disable_created_metrics()

# Request latency buckets: the pay path is tens of ms, a provider timeout seconds.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

HTTP_REQUESTS = Counter(
    "onceshop_http_requests", "HTTP requests answered", ["route", "method", "status"]
)
HTTP_LATENCY = Histogram(
    "onceshop_http_request_duration_seconds",
    "Time to answer an HTTP request",
    ["route", "method"],
    buckets=_LATENCY_BUCKETS,
)
IDEMPOTENCY_OUTCOMES = Counter(
    "onceshop_idempotency_requests",
    "Requests with an Idempotency-Key, by what the layer did: fresh, replayed, in_use (409), "
    "mismatch (422), unknown (503), error (500)",
    ["route", "outcome"],
)
IDEMPOTENCY_TAKEOVERS = Counter(
    "onceshop_idempotency_lock_takeovers",
    "Retries that took over a lock older than IDEMPOTENCY_LOCK_TIMEOUT (holder presumed dead)",
)
PROVIDER_CALLS = Counter(
    "onceshop_provider_calls",
    "Calls to the payment provider by operation and outcome (ok, rejected, unknown, error)",
    ["operation", "outcome"],
)
PROVIDER_LATENCY = Histogram(
    "onceshop_provider_call_duration_seconds",
    "Time of a provider call, answered or not",
    ["operation"],
    buckets=_LATENCY_BUCKETS,
)
RECONCILE_RUNS = Counter(
    "onceshop_reconcile_job_runs",
    "Periodic job runs by outcome: ok, skipped (another runner held the lock), error",
    ["job", "outcome"],
)
RECONCILE_DURATION = Histogram(
    "onceshop_reconcile_job_duration_seconds",
    "Time of one periodic job run",
    ["job"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 120.0, 240.0, 300.0),
)
RECONCILE_ITEMS = Counter(
    "onceshop_reconcile_items",
    "What periodic jobs did, by job and count (rolled_forward, rolled_back, expired, ...)",
    ["job", "result"],
)
REDIS_UNAVAILABLE = Counter(
    "onceshop_redis_unavailable",
    "Moments Redis did not answer, by what went without it: rate-limit (let through), "
    "checkout-token (503), runner-lock (the job ran on its row claims alone), "
    "answer-history (the page renders without it), heartbeat (skipped after the work), "
    "redelivery (the demo panel's 503)",
    ["use"],
)
# Every use at 0 from the start: the alert's series exists before the first outage.
REDIS_USES = (
    "rate-limit",
    "checkout-token",
    "runner-lock",
    "answer-history",
    "heartbeat",
    "redelivery",
)
for _use in REDIS_USES:
    REDIS_UNAVAILABLE.labels(use=_use)
CELERY_TASKS = Counter(
    "onceshop_celery_tasks",
    "Celery tasks run, by task and state (SUCCESS, FAILURE, RETRY, ...)",
    ["task", "state"],
)
CELERY_DURATION = Histogram(
    "onceshop_celery_task_duration_seconds",
    "Time of one Celery task run",
    ["task"],
    buckets=_LATENCY_BUCKETS,
)


# Any string is a method to Django: a client inventing methods must not invent series.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def observe_request(*, route: str, method: str, status: int, seconds: float) -> None:
    method = method if method in _METHODS else "other"
    HTTP_REQUESTS.labels(route=route, method=method, status=str(status)).inc()
    HTTP_LATENCY.labels(route=route, method=method).observe(seconds)


def observe_redis_unavailable(*, use: str) -> None:
    REDIS_UNAVAILABLE.labels(use=use if use in REDIS_USES else "other").inc()
