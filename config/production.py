"""The production profile: what a deployment must set before anything starts.

Whenever ``DEMO_MODE`` is not true, ``config.settings`` calls
``refuse_unsafe_start`` before anything else is configured, so every process
that loads the settings (gunicorn, the Celery worker and beat, every
``manage.py`` command, ``migrate`` included) stops with one message naming every
problem at once. Failing on the first would turn a fix into a loop of restarts.
``migrate`` is refused too, on purpose: an environment with a public secret or a
missing Redis is not one to change a production database from; the fix is the
environment, and it takes one restart.

Pure functions of the environment, so each rule has its own fast test.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

# The development defaults the demo runs with. Public (they are in this file), so
# a production process seeing any of them would be open to anyone who read it.
DEVELOPMENT_SECRET_KEY = "onceshop-insecure-development-key-change-me"  # noqa: S105
DEVELOPMENT_WEBHOOK_SECRET = "whsec-onceshop-development"  # noqa: S105
DEVELOPMENT_PROVIDER_API_KEY = "sandbox-merchant-key"
# `make demo PAYMENT_PROVIDER=stripe` runs against localstripe with these.
DEVELOPMENT_STRIPE_API_KEY = "sk_test_onceshop_demo"
DEVELOPMENT_STRIPE_WEBHOOK_SECRET = "whsec_onceshop_demo_only"  # noqa: S105
# Django's own deploy check (security.W009) wants at least 50 characters.
SECRET_KEY_MIN_LENGTH = 50
# And from many characters: 50 spaces, or 'a' * 50, pass a length check and sign
# nothing. secrets.token_urlsafe(50) draws from 64 and shows ~50 distinct ones; 20
# is far below what any generator gives and far above a typed pattern (Django's own
# deploy check, security.W009, asks only for 5).
SECRET_KEY_MIN_DISTINCT = 20
# A webhook secret is an HMAC key: 32 characters from a generator are ~190 bits;
# the provider's notifications can be forged by whoever guesses a shorter one.
WEBHOOK_SECRET_MIN_LENGTH = 32
# And, like the SECRET_KEY, from many characters: 'a' * 32 is long and guessable.
# secrets.token_urlsafe(32) shows ~30 distinct characters of its 43.
WEBHOOK_SECRET_MIN_DISTINCT = 20


def _split(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _on(raw: str) -> bool:
    # The same spelling of true as config.settings.env_bool.
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def production_problems(env: Mapping[str, str]) -> list[str]:
    """Every reason the environment ``env`` is unsafe to serve from, in a fixed order."""
    problems: list[str] = []
    secret_key = env.get("SECRET_KEY", "")
    if not secret_key:
        problems.append("SECRET_KEY is not set")
    elif secret_key == DEVELOPMENT_SECRET_KEY or secret_key.startswith("django-insecure"):
        problems.append("SECRET_KEY is a development default")
    elif len(secret_key) < SECRET_KEY_MIN_LENGTH:
        problems.append(f"SECRET_KEY is shorter than {SECRET_KEY_MIN_LENGTH} characters")
    elif len(set(secret_key)) < SECRET_KEY_MIN_DISTINCT:
        problems.append(
            f"SECRET_KEY has fewer than {SECRET_KEY_MIN_DISTINCT} distinct characters "
            "(low entropy: generate one)"
        )

    provider = env.get("PAYMENT_PROVIDER", "sandbox").strip() or "sandbox"
    if provider == "stripe":
        problems += _stripe_problems(env)
    else:
        problems += _sandbox_problems(env)

    # Unset, the demo would start embedded servers under .var/: never in production.
    for name in ("DATABASE_URL", "REDIS_URL"):
        if not env.get(name, "").strip():
            problems.append(f"{name} is not set (no embedded servers in production)")
    if _on(env.get("DEBUG", "")):
        problems.append("DEBUG is on (it shows settings and code in error pages)")
    if _on(env.get("SANDBOX_ENABLED", "")):
        problems.append("SANDBOX_ENABLED is on (the sandbox is the demo's stand-in provider)")
    return problems


def _stripe_problems(env: Mapping[str, str]) -> list[str]:
    """PAYMENT_PROVIDER=stripe: its two secrets, or it cannot charge nor trust a webhook."""
    problems: list[str] = []
    api_key = env.get("STRIPE_API_KEY", "").strip()
    if not api_key:
        problems.append("STRIPE_API_KEY is not set (PAYMENT_PROVIDER=stripe)")
    elif api_key == DEVELOPMENT_STRIPE_API_KEY:
        problems.append("STRIPE_API_KEY is the development default")
    # One secret: Stripe signs with every live secret of the endpoint while it
    # rolls one, so the shop checks against the one it has.
    webhook_secret = env.get("STRIPE_WEBHOOK_SECRET", "").strip()
    if not webhook_secret:
        problems.append("STRIPE_WEBHOOK_SECRET is not set (PAYMENT_PROVIDER=stripe)")
    else:
        problems += _webhook_secret_problems(
            "STRIPE_WEBHOOK_SECRET", [webhook_secret], DEVELOPMENT_STRIPE_WEBHOOK_SECRET
        )
    return problems


def _webhook_secret_problems(name: str, values: list[str], development: str) -> list[str]:
    """The first thing wrong with a provider's webhook secrets (several while rotating)."""
    if development in values:
        # Even as one of several while rotating: anyone can sign with it.
        return [f"{name} is (or includes) the development default"]
    if any(len(secret) < WEBHOOK_SECRET_MIN_LENGTH for secret in values):
        # Each of them while rotating: a notification signed with any one is accepted.
        return [
            f"{name} is (or includes) a secret shorter than {WEBHOOK_SECRET_MIN_LENGTH} characters"
        ]
    if any(len(set(secret)) < WEBHOOK_SECRET_MIN_DISTINCT for secret in values):
        return [
            f"{name} is (or includes) a secret of fewer than "
            f"{WEBHOOK_SECRET_MIN_DISTINCT} distinct characters (low entropy: generate one)"
        ]
    return []


def _sandbox_problems(env: Mapping[str, str]) -> list[str]:
    problems: list[str] = []
    webhook_secrets = _split(env.get("SANDBOX_WEBHOOK_SECRET", ""))
    if not webhook_secrets:
        problems.append("SANDBOX_WEBHOOK_SECRET is not set")
    else:
        problems += _webhook_secret_problems(
            "SANDBOX_WEBHOOK_SECRET", webhook_secrets, DEVELOPMENT_WEBHOOK_SECRET
        )

    provider_key = env.get("PROVIDER_API_KEY", "").strip()
    if not provider_key:
        problems.append("PROVIDER_API_KEY is not set")
    elif provider_key == DEVELOPMENT_PROVIDER_API_KEY:
        problems.append("PROVIDER_API_KEY is the development default")
    if DEVELOPMENT_PROVIDER_API_KEY in _split(env.get("SANDBOX_API_KEYS", "")):
        problems.append("SANDBOX_API_KEYS includes the development default")
    return problems


def refuse_unsafe_start(env: Mapping[str, str]) -> None:
    """Raise one ``ImproperlyConfigured`` naming every problem, if there is any."""
    problems = production_problems(env)
    if problems:
        listed = "\n".join(f"  - {problem}" for problem in problems)
        raise ImproperlyConfigured(
            "OnceShop refuses to start in the production profile (DEMO_MODE is not true):\n"
            f"{listed}\n"
            "Set them in the environment (docs/deploying.md); DEMO_MODE=true is for "
            "the local demo only."
        )
