"""Which profile this process runs (demo or production), and the readers of the environment.

Read first: the production profile refuses to start here, before any other
setting is read, and the demo profile starts its embedded servers when
DATABASE_URL / REDIS_URL are unset.
"""

from __future__ import annotations

import os

from config.production import refuse_unsafe_start


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
    # running); see config/embedded.py. Imported here, so a production process never
    # loads it (the image holds no embedded server).
    from config.embedded import ensure_environment

    ensure_environment()

# Where the sandbox provider is served from: its URLs, admin and tasks exist only in
# a process with this on (the demo's provider process and worker, the tests, the
# bench), never in the shop of a deployment. Its app and tables are the demo profile's.
SANDBOX_ENABLED = env_bool("SANDBOX_ENABLED", False)
# The demo's provider server (demo/runner.py): it serves the sandbox and the admin of
# its tables at its root (demo/provider_urls.py), not a second copy of the shop.
SANDBOX_ONLY = SANDBOX_ENABLED and env_bool("SANDBOX_ONLY", False)


def dev_default(value: str) -> str:
    """A development default in the demo; nothing at all in production (refused above)."""
    return value if DEMO_MODE else ""
