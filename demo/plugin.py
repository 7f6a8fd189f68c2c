"""The demo, layered onto the product's settings (config/plugins.py finds this module).

In the demo profile only: its pages and the stand-in provider as apps, their URLs,
the sandbox's own safety net in beat's schedule, and the wallet check in the
audit. A production process never imports this module; a fork deletes demo/ and
the settings lose all of it, with nothing in config/ left naming it.
"""

from __future__ import annotations

from typing import Any

from config.settings.background import every

# The labels of these apps (storefront, sandbox) name their tables, templates and URLs.
APPS = ["demo.shop", "demo.sandbox"]


def layer(settings: dict[str, Any]) -> None:
    settings["DEMO_APPS"] = APPS
    settings["INSTALLED_APPS"] = [*settings["INSTALLED_APPS"], *APPS]
    # The sandbox plays another company: its tasks are registered only by the processes
    # that serve it (SANDBOX_ENABLED); a shop's worker refuses them as unregistered.
    if not settings["SANDBOX_ENABLED"]:
        settings["TASKLESS_APPS"] = [*settings["TASKLESS_APPS"], "demo.sandbox"]
    # The provider's own server (demo/runner.py) serves the sandbox and the admin of its
    # tables at its root, not a second copy of the shop; every other process serves the
    # shop with the demo's pages after its own URLs (demo/urls.py).
    if settings["SANDBOX_ONLY"]:
        settings["ROOT_URLCONF"] = "demo.provider_urls"
    settings["PLUGIN_URLCONFS"] = [*settings["PLUGIN_URLCONFS"], "demo.urls"]
    # The demo's provider, a safety net of its own: notifications and late successes
    # whose enqueue the broker lost (demo/sandbox/services/sweeps.py). Run by the workers
    # that serve the sandbox, as every sandbox task is.
    settings["CELERY_BEAT_SCHEDULE"] = {
        **settings["CELERY_BEAT_SCHEDULE"],
        "sweep-sandbox-messages": every(60.0, "demo.sandbox.tasks.sweep_lost_messages"),
    }
    # The wallet check compares the books with the sandbox's wallets (demo/wallet_audit.py).
    settings["AUDIT_PLUGINS"] = [*settings["AUDIT_PLUGINS"], "demo.wallet_audit.checks"]
