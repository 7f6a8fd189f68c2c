"""Settings of the peers suite (``tools/bench/peers.py``): OnceShop's own, with one
idempotency package wrapped around the same order endpoint.

Only the bench's separate virtualenv (``.var/peers``) has these packages; the
app never imports them. ``BENCH_PEER`` names the package and its storage; the
servers run with ``IDEMPOTENCY_ENABLED=false``, so the package, not OnceShop's
layer, answers retries. Each package is configured as its documentation says
for a multi-process deployment (gunicorn runs 2 workers): shared storage in
PostgreSQL or Redis, never a per-process memory store; defaults otherwise.
"""

import os

from config.settings import *  # noqa: F403 - the app's settings, then the package's
from config.settings import INSTALLED_APPS, MIDDLEWARE, REDIS_URL

PEER = os.environ["BENCH_PEER"]

if PEER in ("drf-idempotency-db", "drf-idempotency-redis"):
    INSTALLED_APPS = [*INSTALLED_APPS, "drf_idempotency"]
    MIDDLEWARE = [*MIDDLEWARE, "drf_idempotency.middleware.IdempotencyMiddleware"]
    IDEMPOTENCY = {
        "BACKEND": "drf_idempotency.backends.database.DatabaseBackend"
        if PEER == "drf-idempotency-db"
        else "drf_idempotency.backends.redis.RedisBackend",
        "BACKEND_OPTIONS": {} if PEER == "drf-idempotency-db" else {"url": REDIS_URL},
    }
elif PEER == "django-idempotency-key":
    MIDDLEWARE = [*MIDDLEWARE, "idempotency_key.middleware.IdempotencyKeyMiddleware"]
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
    IDEMPOTENCY_KEY = {
        # Its default answers a repeated key with 409 and the stored body; None
        # replays the stored status too, as the other contenders do.
        "CONFLICT_STATUS_CODE": None,
        "STORAGE": {"CLASS": "idempotency_key.storage.CacheKeyStorage"},
        "LOCK": {
            "CLASS": "idempotency_key.locks.redis.MultiProcessRedisLock",
            "LOCATION": REDIS_URL,
        },
    }
else:
    raise RuntimeError(f"unknown BENCH_PEER {PEER!r}")
