"""The payment provider: which adapter, where the shop reaches it, and its credentials."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from config.production import DEVELOPMENT_PROVIDER_API_KEY, DEVELOPMENT_WEBHOOK_SECRET
from config.settings.profile import dev_default, env_float, env_int, env_list, env_str

# --- Payments provider ----------------------------------------------------------
# The demo's ports (demo/runner.py serves the shop on PORT and its provider on
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
