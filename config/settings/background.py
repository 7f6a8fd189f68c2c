"""Redis, Celery, and the reconciler's periodic work: its timings and beat's schedule."""

from __future__ import annotations

import os

from celery.schedules import crontab

from config.settings.profile import env_int, env_str

# --- Redis and Celery -----------------------------------------------------------
REDIS_URL = os.environ["REDIS_URL"]
# The broker is Redis unless CELERY_BROKER_URL names another (RabbitMQ: amqp://...);
# Redis keeps the tokens, throttles and locks either way. kombu spells a Unix socket
# URL differently from redis-py.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL.replace("unix://", "redis+socket://", 1))
BROKER_IS_AMQP = CELERY_BROKER_URL.startswith(("amqp://", "amqps://", "pyamqp://"))
CELERY_RESULT_BACKEND = None
# The queue every task goes to (and workers consume); tests use their own.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", "celery")
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# At-least-once delivery: a task is acknowledged after it ran, and redelivered if
# the worker dies mid-task. Every task is therefore written to be safe to run twice.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Hard limit on any task; the broker's visibility timeout below must exceed it,
# or Redis would hand a still-running task to a second worker.
CELERY_TASK_TIME_LIMIT = 300
# Redis only: a message a worker took and never acknowledged (the whole worker was
# killed) goes back to the queue after this long. An hour: far above the task limit.
# RabbitMQ needs no such timer: it requeues the moment the connection drops.
CELERY_VISIBILITY_TIMEOUT_S = env_int("CELERY_VISIBILITY_TIMEOUT_S", 3600)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": CELERY_VISIBILITY_TIMEOUT_S,
    # A broker that accepts connections and never answers (frozen, swapped out) must
    # not hang the request that enqueues at commit (without these: for ever). Give
    # up after 2 s, above the worker's 1 s BRPOP; Celery's publish retries (below)
    # would each wait as long again. redis-py itself reconnects a pooled connection
    # a restart dropped; a publish that still fails is logged and its work swept up
    # later (docs/design.md, "Redis down").
    "socket_timeout": 2,
    "socket_connect_timeout": 2,
}
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 0}
if BROKER_IS_AMQP:
    # RabbitMQ: quorum queues (replicated by Raft; a classic queue lives on one node).
    # They have no global prefetch, which Celery detects, and they take delayed tasks
    # (countdown) through RabbitMQ's native delayed delivery, which routes by topic.
    CELERY_TASK_DEFAULT_QUEUE_TYPE = "quorum"
    CELERY_TASK_DEFAULT_EXCHANGE_TYPE = "topic"
    CELERY_BROKER_TRANSPORT_OPTIONS = {"confirm_publish": True}
    CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TIMEZONE = "UTC"

# --- Reconciliation (reconcile/): beat's periodic work and its timings -------------
# How old an unsettled payment must be before the reconciler asks the provider: far
# above PROVIDER_TIMEOUT_S, so a request still waiting on its answer is never
# overtaken, and long enough for a client's same-key retry after a 503.
RECONCILE_AFTER_S = env_int("RECONCILE_AFTER_S", 60)
# A claimed attempt is leased for this long: other reconcilers skip it meanwhile. It
# covers a whole batch even if every provider call in it times out; running past it
# is harmless (settling is conditional), it only lets a second runner repeat work.
RECONCILE_LEASE_S = env_int("RECONCILE_LEASE_S", 600)
# First retry after the provider could not be reached; doubles on every failure.
RECONCILE_BACKOFF_BASE_S = env_int("RECONCILE_BACKOFF_BASE_S", 30)
# Never wait longer than this between tries: an outage of hours is still retried
# hourly, and the audit keeps showing the attempt meanwhile.
RECONCILE_BACKOFF_CAP_S = env_int("RECONCILE_BACKOFF_CAP_S", 3600)
# A pass stops taking new work after this long, so a task ends well inside
# CELERY_TASK_TIME_LIMIT; what is left waits for the next beat.
RECONCILE_PASS_BUDGET_S = env_int("RECONCILE_PASS_BUDGET_S", 240)
# Provider questions the batched reconcile pass (RECONCILE_PAYMENT_PASS, below) asks at
# once (query, close), each on its own kept-alive connection, none while holding a
# transaction or a row lock. Bounded: the provider is a third party with its own
# limits. Since answers are settled a batch at a time, 16 at once makes a pass about
# 2x faster than one at a time in `make bench` (docs/benchmarks.md); beyond that, on 2
# cores, CPU is the bound.
RECONCILE_CONCURRENCY = env_int("RECONCILE_CONCURRENCY", 16)
# The reconcile job's pass over due payment attempts, as a dotted path. Shipped: the
# batched pass of fastpaths/reconcile.py, which asks a batch's questions at once and
# settles the plain answers in a few statements per batch, and writes the same rows as
# the core's plain pass, reconcile.recovery.unsettled_payments.reconcile_due (the
# default when no setting names one).
RECONCILE_PAYMENT_PASS = env_str(
    "RECONCILE_PAYMENT_PASS", "fastpaths.reconcile.reconcile_due_batched"
)
# The single-runner lock outlives the longest pass (the task's hard time limit) with
# a margin, so it never expires under a live runner; a killed runner's lock frees
# itself after this long.
RECONCILE_LOCK_TTL_S = env_int("RECONCILE_LOCK_TTL_S", CELERY_TASK_TIME_LIMIT + 60)
# An attempt the provider holds for the customer (3-D Secure: pay answered 202) is
# fenced at the provider and failed once it is this old: fifteen minutes is longer
# than a customer takes to approve a payment in their bank's app, and as long as an
# unpaid order lives (ORDER_TTL_S), which cannot expire while the attempt waits.
PAYMENT_ACTION_TIMEOUT_S = env_int("PAYMENT_ACTION_TIMEOUT_S", 900)
# Refunds and accepts on the desk moving more than this (minor units) need a second
# person's approval; 0: every one of them does. The demo raises it (demo/runner.py),
# so its one staff user can act.
DESK_APPROVAL_ABOVE = env_int("DESK_APPROVAL_ABOVE", 0)
# The operator's desk (reconcile/desk/): a payment or refund still unresolved a day
# after it started is past anything the reconciler's backoff (capped at an hour) will
# fix by itself, and a person should look.
CASE_AFTER_S = env_int("CASE_AFTER_S", 86400)
# A batch item that raised this many times in a row (backing off between tries: about
# 30 s, 1, 2, 4 minutes) is a bug or bad data, not a blip: it becomes a case.
CASE_AFTER_FAILURES = env_int("CASE_AFTER_FAILURES", 5)
# The fulfil sweep ships PAID orders only after this long without a shipment: the
# on-commit task normally does it within seconds; the sweep covers a lost message.
FULFIL_SWEEP_AFTER_S = env_int("FULFIL_SWEEP_AFTER_S", 120)


def every(seconds: float, task: str) -> dict[str, object]:
    # `expires`: a tick nobody ran before the next one is dropped, so a stopped worker
    # does not come back to a backlog of identical passes.
    return {"task": task, "schedule": seconds, "options": {"expires": seconds}}


CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    # Half of RECONCILE_AFTER_S: an unknown payment waits at most ~1.5x that.
    "reconcile-payments": every(30.0, "reconcile.tasks.reconcile_payments"),
    # Same pace for what notifications left open and for refunds (orphan refunds
    # included): money the customer is owed goes back within about a minute.
    "reconcile-notifications": every(30.0, "reconcile.tasks.reconcile_notifications"),
    "reconcile-refunds": every(30.0, "reconcile.tasks.reconcile_refunds"),
    # Same pace: a request abandoned after its payment settled is answered soon.
    "complete-abandoned-requests": every(30.0, "reconcile.tasks.complete_abandoned_requests"),
    # ORDER_TTL_S is 15 minutes; a minute late is close enough to give stock back.
    "expire-unpaid-orders": every(60.0, "reconcile.tasks.expire_unpaid_orders"),
    # Hourly: records are kept 24 h, so they leave at most ~4 % late.
    "reap-idempotency-keys": every(3600.0, "idempotency.tasks.reap_idempotency_keys"),
    # Bodies of unmatched notifications leave after days: hourly is exact enough.
    "strip-unmatched-notification-bodies": every(
        3600.0, "callbacks.tasks.strip_unmatched_notification_bodies"
    ),
    # Yesterday's statement, once its day is over at the provider: 00:30 UTC leaves
    # the provider half an hour to settle the day's last charges into it.
    "reconcile-statement": {
        "task": "operations.statements.tasks.reconcile_statement",
        "schedule": crontab(hour=0, minute=30),
        "options": {"expires": 3600.0},
    },
    # What a statement left for later (lines in flight, stray refunds): with the refunds.
    "reconcile-statement-leftovers": every(
        60.0, "operations.statements.tasks.reconcile_statement_leftovers"
    ),
    # The desk's cases that time opens (CASE_AFTER_S is a day: a minute is exact enough).
    "open-cases": every(60.0, "reconcile.tasks.open_cases"),
    # A safety net for a lost fulfil message, not the normal path: every 5 minutes.
    "fulfil-paid-orders": every(300.0, "reconcile.tasks.fulfil_paid_orders"),
    # Feeds the audit-findings alert (docs/operating.md): 15 minutes keeps the cost of
    # the provider's wallet reads low, and a drift is still seen within the hour.
    "audit-books": every(900.0, "operations.audit.tasks.audit_books"),
}
