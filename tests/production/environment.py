"""The production profile, run for real: processes started without the harness's demo
profile (tests/settings.py), with the environment a deployment documents."""

from __future__ import annotations

import os
import secrets

from django.conf import settings

from tests.processes import child_database_url


def production_env(**overrides: str) -> dict[str, str]:
    """The production settings docs/deploying.md lists, with fresh secrets.

    A value of "" removes the variable: a setting that is missing, not empty.
    """
    env = {
        **os.environ,
        # Spelled out, not removed: the harness's profile is in os.environ
        # (tests/settings.py) and tests.processes.run_django starts from it.
        "DEMO_MODE": "false",
        "SANDBOX_ENABLED": "false",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "SANDBOX_WEBHOOK_SECRET": f"whsec-{secrets.token_urlsafe(32)}",
        "PROVIDER_API_KEY": f"live-{secrets.token_urlsafe(24)}",
        "DATABASE_URL": child_database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "ALLOWED_HOSTS": "shop.example.com",
        "SHOP_BASE_URL": "https://shop.example.com",
        "PROVIDER_BASE_URL": "https://provider.example.com/v1",
    }
    env |= overrides
    return {name: value for name, value in env.items() if value != ""}
