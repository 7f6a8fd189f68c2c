"""OnceShop settings: everything a deployment changes comes from the environment.

The README's configuration table lists every variable read here.
"""

from __future__ import annotations

import os
from pathlib import Path

from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from config.databases import databases
from config.production import (
    DEVELOPMENT_PROVIDER_API_KEY,
    DEVELOPMENT_SECRET_KEY,
    DEVELOPMENT_WEBHOOK_SECRET,
    refuse_unsafe_start,
)
from observability.logs import DEFAULT_LOG_FORMAT, logging_config

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    return float(raw) if raw else default


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "")
    return raw.strip().lower() in {"1", "true", "yes", "on"} if raw else default


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


# The demo shows seeded credentials and the chaos controls; never on in production.
# Anything else is the production profile: no development default is accepted and
# the process refuses to start until the environment is right (config/production.py).
DEMO_MODE = env_bool("DEMO_MODE", False)
if not DEMO_MODE:
    refuse_unsafe_start(os.environ)
elif not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
    # Demo only: the embedded servers under .var/ are started (or reused if already
    # running); see config/embedded.py.
    from config.embedded import ensure_environment

    ensure_environment()

# Where the sandbox provider is served from: its URLs, admin and tasks exist only in
# a process with this on (the demo's provider process and worker, the tests, the
# bench), never in the shop of a deployment. Its tables stay installed, and empty.
SANDBOX_ENABLED = env_bool("SANDBOX_ENABLED", False)
# The demo's provider server (config/demo.py): it serves the sandbox and the admin of
# its tables at its root (config/provider_urls.py), not a second copy of the shop.
SANDBOX_ONLY = SANDBOX_ENABLED and env_bool("SANDBOX_ONLY", False)


def dev_default(value: str) -> str:
    """A development default in the demo; nothing at all in production (refused above)."""
    return value if DEMO_MODE else ""


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY", dev_default(DEVELOPMENT_SECRET_KEY))
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")

# --- HTTPS (production profile) ---------------------------------------------------
# On by default outside the demo, which serves plain http on loopback.
SESSION_COOKIE_SECURE = not DEMO_MODE
CSRF_COOKIE_SECURE = not DEMO_MODE
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEMO_MODE)
# One year, the HSTS preload list's minimum. Subdomains and preload follow the
# domain: a fork whose subdomains are not all on HTTPS turns both off.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEMO_MODE else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEMO_MODE)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEMO_MODE)
# How many reverse proxies in front of the app append to X-Forwarded-For and set
# X-Forwarded-Proto. 0, the default: the client is REMOTE_ADDR and both headers are
# ignored, since any client can send them. With N > 0 the client is the N-th address
# from the right of X-Forwarded-For (config/clients.py), and the proxy's
# X-Forwarded-Proto tells whether the request came over HTTPS.
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if TRUSTED_PROXY_COUNT else None

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "idempotency",
    "orders",
    "payments",
    "storefront",
    "reconcile",
    "callbacks",
    "sandbox",
]

MIDDLEWARE = [
    # First: request ids, the access line and request metrics for every answer; it
    # also answers /healthz, /readyz and /metrics before anything else runs.
    "observability.middleware.RequestObservabilityMiddleware",
    # Then a request head or body past the shop's limits: 414, 431, 413, 411.
    "config.middleware.RequestHeadLimitMiddleware",
    "config.middleware.BodySizeLimitMiddleware",
    # Django's own empty 405 (the pages' require_POST) leaves as problem+json.
    "config.middleware.MethodNotAllowedMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # A Content-Security-Policy on every page (config/csp.py).
    "config.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.provider_urls" if SANDBOX_ONLY else "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The admin's read-only pages (config/admin.py).
        "DIRS": [BASE_DIR / "config" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "config.csp.csp_nonce",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------
DATABASE_URL = os.environ["DATABASE_URL"]
# Persistent connections (seconds) for gunicorn's long-lived threads; 0 closes each
# connection at the end of its request. A kept connection is checked before a new
# request uses it: one the server ended meanwhile (a restart, a failover, an idle
# timeout) is replaced instead of failing that request with a 500.
DATABASE_CONN_MAX_AGE = env_int("DATABASE_CONN_MAX_AGE", 60)
# A request that waits on a row lock longer than this fails with 503 `lock-timeout`
# instead of hanging: shorter than any client or gateway timeout in front of us.
DATABASE_LOCK_TIMEOUT_MS = env_int("DATABASE_LOCK_TIMEOUT_MS", 5000)
# A streaming replica for the reads that may be stale (config/dbrouter.py), and a
# pooler in transaction mode in front of PostgreSQL (config/databases.py says what
# that changes; docs/scaling.md). Both off by default: one server, direct.
DATABASE_REPLICA_URL = env_str("DATABASE_REPLICA_URL", "")
DATABASE_TRANSACTION_POOLING = env_bool("DATABASE_TRANSACTION_POOLING", False)
DATABASES = databases(
    url=DATABASE_URL,
    replica_url=DATABASE_REPLICA_URL,
    conn_max_age=DATABASE_CONN_MAX_AGE,
    lock_timeout_ms=DATABASE_LOCK_TIMEOUT_MS,
    transaction_pooling=DATABASE_TRANSACTION_POOLING,
)
DATABASE_ROUTERS = ["config.dbrouter.PrimaryReplicaRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

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
# Provider questions the reconciler asks at once (query, close), each on its own
# kept-alive connection, none while holding a transaction or a row lock. Bounded:
# the provider is a third party with its own limits. Since answers are settled a
# batch at a time, 16 at once makes a pass about 2x faster than one at a time in
# `make bench` (docs/benchmarks.md); beyond that, on 2 cores, CPU is the bound.
RECONCILE_CONCURRENCY = env_int("RECONCILE_CONCURRENCY", 16)
# The single-runner lock outlives the longest pass (the task's hard time limit) with
# a margin, so it never expires under a live runner; a killed runner's lock frees
# itself after this long.
RECONCILE_LOCK_TTL_S = env_int("RECONCILE_LOCK_TTL_S", CELERY_TASK_TIME_LIMIT + 60)
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


def _every(seconds: float, task: str) -> dict[str, object]:
    # `expires`: a tick nobody ran before the next one is dropped, so a stopped worker
    # does not come back to a backlog of identical passes.
    return {"task": task, "schedule": seconds, "options": {"expires": seconds}}


CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    # Half of RECONCILE_AFTER_S: an unknown payment waits at most ~1.5x that.
    "reconcile-payments": _every(30.0, "reconcile.tasks.reconcile_payments"),
    # Same pace for what notifications left open and for refunds (orphan refunds
    # included): money the customer is owed goes back within about a minute.
    "reconcile-notifications": _every(30.0, "reconcile.tasks.reconcile_notifications"),
    "reconcile-refunds": _every(30.0, "reconcile.tasks.reconcile_refunds"),
    # Same pace: a request abandoned after its payment settled is answered soon.
    "complete-abandoned-requests": _every(30.0, "reconcile.tasks.complete_abandoned_requests"),
    # ORDER_TTL_S is 15 minutes; a minute late is close enough to give stock back.
    "expire-unpaid-orders": _every(60.0, "reconcile.tasks.expire_unpaid_orders"),
    # Hourly: records are kept 24 h, so they leave at most ~4 % late.
    "reap-idempotency-keys": _every(3600.0, "idempotency.tasks.reap_idempotency_keys"),
    # Bodies of unmatched notifications leave after days: hourly is exact enough.
    "strip-unmatched-notification-bodies": _every(
        3600.0, "callbacks.tasks.strip_unmatched_notification_bodies"
    ),
    # Yesterday's statement, once its day is over at the provider: 00:30 UTC leaves
    # the provider half an hour to settle the day's last charges into it.
    "reconcile-statement": {
        "task": "reconcile.tasks.reconcile_statement",
        "schedule": crontab(hour=0, minute=30),
        "options": {"expires": 3600.0},
    },
    # What a statement left for later (lines in flight, stray refunds): with the refunds.
    "reconcile-statement-leftovers": _every(60.0, "reconcile.tasks.reconcile_statement_leftovers"),
    # The desk's cases that time opens (CASE_AFTER_S is a day: a minute is exact enough).
    "open-cases": _every(60.0, "reconcile.tasks.open_cases"),
    # A safety net for a lost fulfil message, not the normal path: every 5 minutes.
    "fulfil-paid-orders": _every(300.0, "reconcile.tasks.fulfil_paid_orders"),
    # Feeds the audit-findings alert (docs/operating.md): 15 minutes keeps the cost of
    # the provider's wallet reads low, and a drift is still seen within the hour.
    "audit-books": _every(900.0, "reconcile.tasks.audit_books"),
}
if DEMO_MODE:
    # The demo's provider, a safety net of its own: notifications and late successes
    # whose enqueue the broker lost (sandbox/services/sweeps.py). Run by the workers
    # that serve the sandbox (SANDBOX_ENABLED), as every sandbox task is.
    CELERY_BEAT_SCHEDULE["sweep-sandbox-messages"] = _every(
        60.0, "sandbox.tasks.sweep_lost_messages"
    )

# --- Web pages (storefront/) ---------------------------------------------------------
# The demo shop's pages log in with the session; an anonymous visitor of a page that
# needs a user is sent to the shop's own login page (not the admin's), and comes back
# to the catalogue after logging in.
LOGIN_URL = "storefront:login"
LOGIN_REDIRECT_URL = "storefront:home"
# Database sessions that treat a session cookie no row can hold (a NUL) as unknown.
SESSION_ENGINE = "config.sessions"

# --- Auth, i18n, static -----------------------------------------------------------
# Django's four: not like the username or e-mail, 8+ characters, not one of the 20,000
# most common passwords, not all digits. The demo's seeded passwords pass them all.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# --- Languages (the demo's pages; docs/zh-CN/ is the Chinese edition of the docs) --
# English is the fallback; LocaleMiddleware picks the language from the switcher's
# cookie, else the browser's Accept-Language. The catalogue lives in locale/ and is
# compiled by `python -m config.i18n` (make install / test / demo do it).
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
# The switcher's choice outlives the browser session: a year, like any preference.
LANGUAGE_COOKIE_AGE = 365 * 24 * 3600
LANGUAGE_COOKIE_SAMESITE = "Lax"
LANGUAGE_COOKIE_SECURE = SESSION_COOKIE_SECURE
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# --- API ------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "config.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # UTF-8 only, nesting bounded, finite numbers, no lone surrogates (config/strictjson.py).
    "DEFAULT_PARSER_CLASSES": ["config.strictjson.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "config.pagination.PageNumberPagination",
    "DEFAULT_THROTTLE_CLASSES": ["config.throttling.UserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"user": env_str("API_THROTTLE_RATE", "6000/min")},
    "EXCEPTION_HANDLER": "config.errors.exception_handler",
    # A request body's Content-Type must name a parser's type: never */* (config/strictjson.py).
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "config.strictjson.StrictContentNegotiation",
    "DEFAULT_SCHEMA_CLASS": "config.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
# Throttle counters live in Redis so every gunicorn worker shares them.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
    }
}

# --- Abuse limits (429 / 409 with a code each; README's contract table) -----------
# Rates as DRF spells them ("30/min"); empty turns a limit off. Login attempts are
# counted before the password is checked: the login page, the admin's and the token
# endpoint share both counters.
LOGIN_RATE_PER_ADDRESS = env_str("LOGIN_RATE_PER_ADDRESS", "60/min")
LOGIN_RATE_PER_USERNAME = env_str("LOGIN_RATE_PER_USERNAME", "10/min")
# The provider's notifications per source address: generous, since the provider
# retries what we refuse (100/s on average, far above any real provider's pace).
CALLBACK_RATE_PER_ADDRESS = env_str("CALLBACK_RATE_PER_ADDRESS", "6000/min")
# Unpaid orders one user may hold at once (each holds stock until ORDER_TTL_S), and
# idempotency records one user may create per clock hour (each is kept
# IDEMPOTENCY_KEY_TTL). 0 means no cap.
MAX_OPEN_ORDERS_PER_USER = env_int("MAX_OPEN_ORDERS_PER_USER", 20)
MAX_KEYS_PER_USER_PER_HOUR = env_int("MAX_KEYS_PER_USER_PER_HOUR", 10_000)
# Live checkout forms per session: showing one more evicts the oldest (its submit
# then answers checkout-token-invalid), so reloading a page cannot fill Redis.
CHECKOUT_TOKENS_PER_SESSION = env_int("CHECKOUT_TOKENS_PER_SESSION", 20)
# Notifications that matched no payment are kept for reconciliation; their raw body
# only this long (7 days), then the reaper empties it: a flood of signed strays
# cannot grow the table by its bodies.
UNMATCHED_NOTIFICATION_BODY_TTL_S = env_int("UNMATCHED_NOTIFICATION_BODY_TTL_S", 7 * 24 * 3600)

# Largest request body the API accepts; larger ones get 413 `payload-too-large`.
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 64 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES

# --- Idempotency ------------------------------------------------------------------
# Finished records are kept this long (24 h, the IETF draft's suggested minimum
# window and longer than any sane client retry schedule), then reaped.
IDEMPOTENCY_KEY_TTL = env_int("IDEMPOTENCY_KEY_TTL", 24 * 3600)
# A request holding a key longer than this is presumed dead (crashed worker, killed
# process) and a retry may take over. Must exceed the slowest phase, i.e. the
# provider timeout plus database work, with a wide margin.
IDEMPOTENCY_LOCK_TIMEOUT = env_int("IDEMPOTENCY_LOCK_TIMEOUT", 60)
# Bench-only switch: False turns the Idempotency-Key layer off so `make bench` can
# measure its cost and tests can show the other layers hold on their own.
IDEMPOTENCY_ENABLED = env_bool("IDEMPOTENCY_ENABLED", True)

# --- Orders -----------------------------------------------------------------------
ORDER_TTL_S = env_int("ORDER_TTL_S", 900)
ORDER_MAX_LINES = 50
ORDER_MAX_QUANTITY = 1000
# The largest order amount (minor units) the shop takes: an order the provider could
# never charge is refused when it is created, not when it is paid. Set it to your
# provider's per-charge maximum; the default is the sandbox's (its MAX_AMOUNT).
ORDER_MAX_AMOUNT = env_int("ORDER_MAX_AMOUNT", 10**12)

# --- Payments provider ----------------------------------------------------------
# The demo's ports (config/demo.py serves the shop on PORT and its provider on
# PROVIDER_PORT). Read here too, so every command run beside a demo on another PORT
# (`manage.py story`, `audit`, `reconcile`) finds it without more settings.
PORT = env_int("PORT", 8000)
PROVIDER_PORT = env_int("PROVIDER_PORT", PORT + 1)
# Where the shop reaches its payment provider (the sandbox, mounted at /sandbox/ of
# its own server). The shop talks to it only over HTTP.
PROVIDER_BASE_URL = env_str(
    "PROVIDER_BASE_URL", f"http://127.0.0.1:{PROVIDER_PORT}/sandbox"
).rstrip("/")
# Connect/read timeout of every provider call. Well below IDEMPOTENCY_LOCK_TIMEOUT,
# so a request waiting on the provider never looks abandoned while it still runs.
PROVIDER_TIMEOUT_S = env_float("PROVIDER_TIMEOUT_S", 5.0)
# The merchant credential the shop presents to the provider.
PROVIDER_API_KEY = env_str("PROVIDER_API_KEY", dev_default(DEVELOPMENT_PROVIDER_API_KEY))
# The shop's public base URL: the provider sends notifications to it.
SHOP_BASE_URL = env_str("SHOP_BASE_URL", f"http://127.0.0.1:{PORT}").rstrip("/")

# Which adapter the shop talks to (payments/providers/): the stand-in sandbox, or Stripe.
PAYMENT_PROVIDER = env_str("PAYMENT_PROVIDER", "sandbox")
if PAYMENT_PROVIDER not in ("sandbox", "stripe"):
    raise ImproperlyConfigured(
        f"PAYMENT_PROVIDER must be sandbox or stripe, not {PAYMENT_PROVIDER!r}"
    )

# --- Stripe (PAYMENT_PROVIDER=stripe) --------------------------------------------
# The secret key (sk_live_... / sk_test_...), the webhook endpoint's signing secret
# (whsec_..., from the dashboard), and the API's address (a local emulator in tests).
STRIPE_API_KEY = env_str("STRIPE_API_KEY", "")
STRIPE_WEBHOOK_SECRET = env_str("STRIPE_WEBHOOK_SECRET", "")
STRIPE_API_BASE = env_str("STRIPE_API_BASE", "https://api.stripe.com").rstrip("/")

# --- Sandbox provider -------------------------------------------------------------
# HMAC secret of the Sandbox-Signature header. Comma-separated to rotate: the sandbox
# signs with each (one v1= per secret) and the shop accepts a match with any.
SANDBOX_WEBHOOK_SECRET = env_str("SANDBOX_WEBHOOK_SECRET", dev_default(DEVELOPMENT_WEBHOOK_SECRET))
SANDBOX_WALLET_START = env_int("SANDBOX_WALLET_START", 1_000_000)
# The merchant keys the sandbox accepts (the shop sends PROVIDER_API_KEY).
SANDBOX_API_KEYS = env_list("SANDBOX_API_KEYS", PROVIDER_API_KEY)
# URL prefixes a notify_url must fall under (comma-separated; scheme, host, port and
# path prefix are compared). Empty: SHOP_BASE_URL, the one shop this sandbox serves.
SANDBOX_NOTIFY_URLS = env_list("SANDBOX_NOTIFY_URLS", "")

SPECTACULAR_SETTINGS = {
    "TITLE": "OnceShop API",
    "VERSION": "1.0.0",
    "DESCRIPTION": (
        "A reference payment/order service where every retry is a replay.\n\n"
        "**Idempotency-Key.** `POST /api/v1/orders/`, `/pay/`, `/cancel/` and `/refunds/` require "
        "an `Idempotency-Key` header (1-255 characters from `A-Z a-z 0-9 - _ . : ~`, bare or as an "
        "RFC 8941 sf-string). Keys are scoped per user. A retry with the same key and body replays "
        "the first answer with `Idempotent-Replayed: true`; a different body is 422 "
        "`idempotency-key-mismatch`; a retry while the first is running is 409 "
        "`idempotency-key-in-use` with `Retry-After`. Finished keys are kept for "
        f"{IDEMPOTENCY_KEY_TTL} seconds (`IDEMPOTENCY_KEY_TTL`); after that a reused key is a new "
        "request. A request holding a key longer than "
        f"{IDEMPOTENCY_LOCK_TIMEOUT} seconds (`IDEMPOTENCY_LOCK_TIMEOUT`) is presumed dead "
        "and a retry takes over. Errors are RFC 9457 problem+json with a stable `code`."
    ),
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # The default hook (enum components), then the links between operations.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.openapi.add_links",
    ],
}

# --- Operating it (observability/, docs/operating.md) ---------------------------------
# One JSON object per line (what a log pipeline parses), or `plain` for a console a
# person reads (`make demo` picks plain). Either way every line carries the request id
# and what is known of the payment (observability/context.py).
LOG_FORMAT = env_str("LOG_FORMAT", DEFAULT_LOG_FORMAT)
LOGGING = logging_config(log_format=LOG_FORMAT, level=env_str("LOG_LEVEL", "INFO"))
# /metrics: `Authorization: Bearer <METRICS_TOKEN>` once set (any profile); empty =
# open in the demo, closed in production.
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
# A Celery worker serves its own counters on this port (0: it does not); the bind
# address is the worker's own network, never published to the Internet.
CELERY_METRICS_PORT = env_int("CELERY_METRICS_PORT", 0)
CELERY_METRICS_BIND = env_str("CELERY_METRICS_BIND", "127.0.0.1")
