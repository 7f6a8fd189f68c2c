"""OnceShop settings: everything a deployment changes comes from the environment.

docs/configuration.md lists every variable read here.
"""

from __future__ import annotations

import os
from pathlib import Path

from config import plugins
from config.databases import databases
from config.production import DEVELOPMENT_SECRET_KEY

# The parts beside this module, read here as if written here: ``profile`` first (demo
# or production, the environment's readers; it refuses an unsafe production start
# before anything else is read), ``background`` (Redis, Celery, the reconciler's
# timings, beat's schedule), ``api`` (DRF, its cache, the abuse limits) and
# ``provider`` (which payment provider, where, and its credentials).
from config.settings.profile import *  # noqa: F403  # isort: skip
from config.settings.background import *  # noqa: F403  # isort: skip
from config.settings.api import *  # noqa: F403  # isort: skip
from config.settings.provider import *  # noqa: F403  # isort: skip
from config.settings.profile import (
    DEMO_MODE,
    dev_default,
    env_bool,
    env_int,
    env_list,
    env_str,
)
from observability.logs import DEFAULT_LOG_FORMAT, logging_config

BASE_DIR = Path(__file__).resolve().parents[2]

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
# from the right of X-Forwarded-For (edge/clients.py), and the proxy's
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
    "reconcile",
    "callbacks",
    # Operations, beside the core (operations/): they import it, it never imports them.
    "operations.audit",
    "operations.statements",
]
# The apps a plugin adds (see "Plugins" at the end): the demo's pages and its
# stand-in provider, in the demo profile. Empty in production and in a fork that
# deleted demo/.
DEMO_APPS: list[str] = []
# Apps installed here whose Celery tasks this process does not register (a plugin's
# that only some processes run: the sandbox's, outside SANDBOX_ENABLED).
TASKLESS_APPS: list[str] = []
# Checks the audit runs after its own (dotted paths of ``f(provider) -> [(title,
# check)]``): a plugin's, as the demo's wallet check, which compares the books with
# the sandbox's wallets.
AUDIT_PLUGINS: list[str] = []

MIDDLEWARE = [
    # First: request ids, the access line and request metrics for every answer; it
    # also answers /healthz, /readyz and /metrics before anything else runs.
    "observability.middleware.RequestObservabilityMiddleware",
    # Then a request head or body past the shop's limits: 414, 431, 413, 411.
    "edge.middleware.RequestHeadLimitMiddleware",
    "edge.middleware.BodySizeLimitMiddleware",
    # Django's own empty 405 (the pages' require_POST) leaves as problem+json.
    "edge.middleware.MethodNotAllowedMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # A Content-Security-Policy on every page (edge/csp.py).
    "edge.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: a token request's replay answered from its record (a fast path:
    # fastpaths/replay.py), after every middleware above, each of which also runs on
    # the answer's way out.
    "fastpaths.replay.ReplayMiddleware",
]

ROOT_URLCONF = "config.urls"
# URL confs config/urls.py includes after its own, at the root: a plugin's pages.
PLUGIN_URLCONFS: list[str] = []
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The admin's read-only pages (edge/admin.py).
        "DIRS": [BASE_DIR / "edge" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "edge.csp.csp_nonce",
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

# --- Web pages (storefront/) ---------------------------------------------------------
# The demo shop's pages log in with the session; an anonymous visitor of a page that
# needs a user is sent to the shop's own login page (not the admin's), and comes back
# to the catalogue after logging in.
LOGIN_URL = "storefront:login"
LOGIN_REDIRECT_URL = "storefront:home"
# Database sessions that treat a session cookie no row can hold (a NUL) as unknown.
SESSION_ENGINE = "edge.auth"

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

# --- Idempotency ------------------------------------------------------------------
# Finished records are kept this long (24 h, the IETF draft's suggested minimum
# window and longer than any sane client retry schedule), then reaped.
IDEMPOTENCY_KEY_TTL = env_int("IDEMPOTENCY_KEY_TTL", 24 * 3600)
# A request holding a key longer than this is presumed dead (crashed worker, killed
# process) and a retry may take over. Must exceed the slowest phase, i.e. the
# provider timeout plus database work, with a wide margin.
IDEMPOTENCY_LOCK_TIMEOUT = env_int("IDEMPOTENCY_LOCK_TIMEOUT", 60)
# Where the core looks a key's record up and inserts it (idempotency/records.py, the
# ORM, without this setting): the same two statements in hand-written SQL, the first
# look taken from the replay middleware's read (a fast path: fastpaths/records.py).
IDEMPOTENCY_RECORDS = "fastpaths.records"
# Bench-only switch: False turns the Idempotency-Key layer off so `make bench` can
# measure its cost and tests can show the other layers hold on their own. The layer
# is switched where it is plugged in: the function that runs a keyed request
# (IDEMPOTENCY_RUNNER, idempotency.core.execute without it) and the record store
# become the layer-off plug's (fastpaths/unkeyed.py, whose LAYER_OFF says the same).
IDEMPOTENCY_ENABLED = env_bool("IDEMPOTENCY_ENABLED", True)
if not IDEMPOTENCY_ENABLED:
    IDEMPOTENCY_RUNNER = "fastpaths.unkeyed.run_unkeyed"
    IDEMPOTENCY_RECORDS = "fastpaths.unkeyed"

# --- Orders -----------------------------------------------------------------------
ORDER_TTL_S = env_int("ORDER_TTL_S", 900)
ORDER_MAX_LINES = 50
ORDER_MAX_QUANTITY = 1000
# The largest order amount (minor units) the shop takes: an order the provider could
# never charge is refused when it is created, not when it is paid. Set it to your
# provider's per-charge maximum; the default is the sandbox's (its MAX_AMOUNT).
ORDER_MAX_AMOUNT = env_int("ORDER_MAX_AMOUNT", 10**12)

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
    # Operation ids name the whole path (api_v1_orders_create), in every profile: left
    # to guess, drf-spectacular strips the prefix all paths share, which is /api/v1/
    # without the sandbox's /sandbox/v1/, and the links below would name no operation.
    "SCHEMA_PATH_PREFIX": "",
    # The default hook (enum components), then the links between operations.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "edge.openapi.add_links",
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

# --- Plugins (config/plugins.py) ------------------------------------------------------
# In the demo profile, every package beside the product with a plugin.py layers itself
# onto the settings above (the demo's: demo/plugin.py); a fork that deleted demo/ has
# none. A production process discovers and imports none, whatever the tree holds.
PLUGINS = plugins.discover(BASE_DIR) if DEMO_MODE else []
plugins.layer(PLUGINS, globals())
