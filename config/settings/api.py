"""The API's framework (DRF, the cache its throttles count in) and the abuse limits."""

from __future__ import annotations

from config.settings.background import REDIS_URL
from config.settings.profile import env_int, env_str

# --- API ------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # edge.auth.TokenAuthentication, taking the token the replay middleware read
        # with the key's record instead of reading it again (a fast path: fastpaths/auth.py).
        "fastpaths.auth.ReadTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # UTF-8 only, nesting bounded, finite numbers, no lone surrogates (edge/strictjson.py).
    "DEFAULT_PARSER_CLASSES": ["edge.strictjson.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "edge.pagination.PageNumberPagination",
    "DEFAULT_THROTTLE_CLASSES": ["edge.throttling.UserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"user": env_str("API_THROTTLE_RATE", "6000/min")},
    "EXCEPTION_HANDLER": "edge.handler.exception_handler",
    # A request body's Content-Type must name a parser's type: never */* (edge/strictjson.py).
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "edge.strictjson.StrictContentNegotiation",
    "DEFAULT_SCHEMA_CLASS": "edge.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
# Throttle counters live in Redis so every gunicorn worker shares them.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
    }
}

# --- Abuse limits (429 / 409 with a code each; docs/api.md's contract table) -----------
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
