"""config/plugins.py: the demo layers itself onto the settings; config/ never names it.

Settings discover every package with a plugin.py in the demo profile, and each
changes the settings' namespace. Without demo/ the same profile runs with no
plugin, no demo app, URL or beat entry.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import resolve

from config import plugins
from tests.processes import ROOT
from tests.test_product_alone import product_copy

# A dotted path into the demo: "demo", "demo.shop", "demo.plugin", "demo.sandbox.tasks.x".
DEMO_MODULE = re.compile(r"^demo(\.|$)")


def strings_in(path: Path) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_config_names_no_demo_module():
    named = [
        f"{path.relative_to(ROOT)}:{line} {value!r}"
        for path in sorted((ROOT / "config").rglob("*.py"))
        for line, value in strings_in(path)
        if DEMO_MODULE.match(value)
    ]

    assert named == []


def test_the_check_reads_a_demo_module_named_in_a_string(tmp_path):
    source = tmp_path / "settings.py"
    source.write_text('APPS = ["orders", "demo.shop"]\nKEY = "sk_test_onceshop_demo"\n')

    assert [value for _, value in strings_in(source) if DEMO_MODULE.match(value)] == ["demo.shop"]


def test_every_package_with_a_plugin_module_is_discovered_and_nothing_else(tmp_path):
    for name, files in {
        "shop_extra": ["__init__.py", "plugin.py"],
        "another": ["__init__.py", "plugin.py"],
        "not_a_package": ["plugin.py"],
        "no_plugin": ["__init__.py", "apps.py"],
    }.items():
        (tmp_path / name).mkdir()
        for file in files:
            (tmp_path / name / file).write_text("")

    assert plugins.discover(tmp_path) == ["another.plugin", "shop_extra.plugin"]
    assert plugins.discover(ROOT) == ["demo.plugin"]


def test_each_plugin_changes_the_settings_in_order(tmp_path, monkeypatch):
    for name, app in (("first_extra", "first_extra.app"), ("second_extra", "second_extra.app")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
        (tmp_path / name / "plugin.py").write_text(
            f"def layer(settings):\n    settings['INSTALLED_APPS'] += [{app!r}]\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace = {"INSTALLED_APPS": ["orders"]}

    plugins.layer(plugins.discover(tmp_path), namespace)

    assert namespace == {"INSTALLED_APPS": ["orders", "first_extra.app", "second_extra.app"]}


def test_the_demo_plugin_layers_its_apps_urls_beat_entry_and_audit_check():
    # The tests' profile: the demo's, serving the sandbox (tests/settings.py).
    assert settings.PLUGINS == ["demo.plugin"]
    assert settings.DEMO_APPS == ["demo.shop", "demo.sandbox"]
    assert settings.INSTALLED_APPS[-2:] == ["demo.shop", "demo.sandbox"]
    assert settings.TASKLESS_APPS == []
    assert settings.PLUGIN_URLCONFS == ["demo.urls"]
    assert settings.ROOT_URLCONF == "config.urls"
    assert settings.AUDIT_PLUGINS == ["demo.wallet_audit.checks"]
    sweep = settings.CELERY_BEAT_SCHEDULE["sweep-sandbox-messages"]
    assert sweep["task"] == "demo.sandbox.tasks.sweep_lost_messages"
    assert resolve("/sandbox/").url_name == "sandbox-index"
    assert resolve("/").namespace == "storefront"


# Printed by a child process as JSON: what the settings hold and what the URLs serve.
SHOW = textwrap.dedent(
    """
    import json
    import django
    django.setup()
    from django.conf import settings
    from django.urls import Resolver404, resolve
    from config.celery import _task_packages

    def served(path):
        try:
            resolve(path)
        except Resolver404:
            return False
        return True

    print(json.dumps({
        "plugins": settings.PLUGINS,
        "demo_apps": settings.DEMO_APPS,
        "apps": settings.INSTALLED_APPS,
        "task_packages": _task_packages(),
        "urlconf": settings.ROOT_URLCONF,
        "beat": sorted(settings.CELERY_BEAT_SCHEDULE),
        "audit": settings.AUDIT_PLUGINS,
        "sandbox_served": served("/sandbox/"),
    }))
    """
)


def show_settings(cwd: Path, **env: str) -> dict:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("SANDBOX_ENABLED", "SANDBOX_ONLY")
    }
    environment |= {"DJANGO_SETTINGS_MODULE": "config.settings", "DEMO_MODE": "true", **env}
    done = subprocess.run(
        [sys.executable, "-c", SHOW],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_shop_process_of_the_demo_leaves_the_sandbox_tasks_and_urls_out():
    shown = show_settings(ROOT, SANDBOX_ENABLED="false")

    assert "demo.sandbox" in shown["apps"]
    assert "demo.sandbox" not in shown["task_packages"]
    assert "demo.shop" in shown["task_packages"]
    assert shown["sandbox_served"] is False


@pytest.mark.slow
def test_the_provider_process_of_the_demo_serves_the_provider_urls():
    shown = show_settings(ROOT, SANDBOX_ENABLED="true", SANDBOX_ONLY="true")

    assert shown["urlconf"] == "demo.provider_urls"
    assert "demo.sandbox" in shown["task_packages"]


@pytest.mark.slow
def test_the_demo_profile_without_the_demo_package_runs_with_no_plugin(tmp_path):
    copy = product_copy(tmp_path / "shop")
    assert not (copy / "demo").exists()

    shown = show_settings(copy, SANDBOX_ENABLED="true", SANDBOX_ONLY="true")

    assert shown["plugins"] == []
    assert shown["demo_apps"] == []
    assert [app for app in shown["apps"] if app.startswith("demo")] == []
    assert shown["urlconf"] == "config.urls"
    assert "sweep-sandbox-messages" not in shown["beat"]
    assert shown["audit"] == []
    assert shown["sandbox_served"] is False
