"""Plugins: packages beside the product that layer themselves onto its settings.

A plugin is a top-level package holding a ``plugin.py`` whose ``layer(settings)``
adds to the settings' namespace what the package brings: apps, URL confs, beat's
entries, audit checks. The settings discover them in the demo profile only
(config/settings/__init__.py), so a production process imports none of them,
and nothing in config/ names one: a fork that deletes the package deletes its
settings with it.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any


def discover(base_dir: Path) -> list[str]:
    """The module of every package under ``base_dir`` with a plugin.py, by name."""
    return sorted(
        f"{path.parent.name}.plugin"
        for path in base_dir.glob("*/plugin.py")
        if (path.parent / "__init__.py").is_file()
    )


def layer(plugins: list[str], settings: dict[str, Any]) -> None:
    """Let each plugin, in order, change the settings' namespace ``settings``."""
    for name in plugins:
        import_module(name).layer(settings)
