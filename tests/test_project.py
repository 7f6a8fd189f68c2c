"""The project around the code: OpenAPI, offline docs, docker-compose, settings."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.test import Client

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def schema() -> dict:
    response = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


@pytest.mark.django_db
def test_openapi_documents_the_idempotency_header_codes_and_window(schema):
    create = schema["paths"]["/api/v1/orders/"]["post"]
    header = next(p for p in create["parameters"] if p["name"] == "Idempotency-Key")

    assert header["in"] == "header"
    assert header["required"] is True
    responses = create["responses"]
    assert "idempotency-key-in-use" in responses["409"]["description"]
    assert "idempotency-key-mismatch" in responses["422"]["description"]
    assert "idempotency-key-missing" in responses["400"]["description"]
    description = schema["info"]["description"]
    assert f"kept for {settings.IDEMPOTENCY_KEY_TTL} seconds" in description
    assert "IDEMPOTENCY_LOCK_TIMEOUT" in description


@pytest.mark.django_db
def test_swagger_ui_is_served_without_a_cdn():
    page = Client().get("/api/docs/").content.decode()

    # Every script and stylesheet is ours. (Not `"cdn" not in page`: the page holds
    # a random CSRF token, which spelled "cdn" now and then.)
    assets = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']+)', page)
    assert "swagger-ui" in page
    assert assets
    assert [url for url in assets if re.match(r"(?:[a-z]+:)?//", url, re.IGNORECASE)] == []
    assert "/static/drf_spectacular_sidecar/" in page


def test_docker_compose_parses_and_has_every_service_with_a_health_check():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())

    services = compose["services"]
    assert set(services) == {"postgres", "redis", "web", "provider", "worker", "beat"}
    for name in ("postgres", "redis", "web", "provider"):
        assert "healthcheck" in services[name], name
    for name in ("web", "provider", "worker", "beat"):
        env = services[name]["environment"]
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["REDIS_URL"].startswith("redis://")
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"


def _published(service: dict) -> set[tuple[str, int, int]]:
    """("127.0.0.1", host port, container port) for each of the service's ports."""
    found = set()
    for port in service.get("ports", []):
        address, host, container = str(port).split(":")
        found.add((address, int(host), int(container)))
    return found


def test_the_demo_compose_publishes_what_the_readme_links_to():
    # `docker compose config` needs the compose plugin, absent here: the file is read
    # as compose reads it (YAML with merge keys) and checked against the README.
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    readme = (ROOT / "README.md").read_text()
    linked = {int(port) for port in re.findall(r"http://127\.0\.0\.1:(\d+)/", readme)}

    published = {host for service in services.values() for _a, host, _c in _published(service)}
    assert {8000, 8001} <= linked
    assert linked <= published  # every 127.0.0.1 link of the README answers
    assert _published(services["web"]) == {("127.0.0.1", 8000, 8000)}
    assert _published(services["provider"]) == {("127.0.0.1", 8001, 8000)}
    assert all(addr == "127.0.0.1" for s in services.values() for addr, _h, _c in _published(s))


def test_every_demo_service_is_restarted_when_it_dies():
    # "The supervisor starts a new one" (the chaos panel): under compose, the policy.
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]

    for name, service in services.items():
        assert service.get("restart") in {"unless-stopped", "always", "on-failure"}, name


def test_the_atomic_requests_setting_stays_off():
    # The idempotency layer owns its transactions; a request-wide one would merge
    # the phases and break the recovery points.
    assert settings.DATABASES["default"]["ATOMIC_REQUESTS"] is False


def _manage(*args: str, port: str) -> subprocess.CompletedProcess[str]:
    """`.venv/bin/python manage.py …` as a reader types it, beside a demo on ``port``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"SHOP_BASE_URL", "PROVIDER_BASE_URL", "PROVIDER_PORT", "PORT"}
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**env, "PORT": port},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_story_command_finds_the_shop_on_the_port_the_demo_runs_on():
    # Port 9: nothing listens, so the command names where it looked, and fails cleanly.
    done = _manage("story", port="9")

    assert "Running the story against http://127.0.0.1:9 " in done.stdout
    assert "The shop at http://127.0.0.1:9 is not reachable" in done.stderr
    assert done.returncode == 1
    assert "Traceback" not in done.stderr


def test_the_provider_url_follows_port_too():
    done = _manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.PROVIDER_BASE_URL)",
        port="9300",
    )

    assert done.stdout.strip().splitlines()[-1] == "http://127.0.0.1:9301/sandbox", done.stderr


def test_the_make_targets_a_reader_is_told_about_exist():
    makefile = (ROOT / "Makefile").read_text()
    readme = (ROOT / "README.md").read_text()

    # The demo and what runs beside it need the runtime and the embedded servers; the
    # tests, the linters and the bench add the development tools (tests/test_locks.py).
    for target in ("demo", "story", "audit", "reconcile", "shell"):
        assert f"\n{target}: install\n" in makefile, target
        assert f"make {target}" in readme, target
    for target in ("test", "lint", "bench"):
        assert f"\n{target}: install-dev\n" in makefile, target
        assert f"make {target}" in readme, target


def test_the_image_and_compose_probe_the_health_endpoints():
    # Liveness in the image (a database outage must not restart every container),
    # readiness where compose gates on "healthy".
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "HEALTHCHECK" in dockerfile
    assert "/healthz" in dockerfile
    assert "python:config.gunicorn" in dockerfile  # the multiprocess metrics hooks
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name in ("web", "provider"):
        assert "/readyz" in " ".join(services[name]["healthcheck"]["test"]), name
    assert "/healthz" in " ".join(services["worker"]["healthcheck"]["test"])
    assert services["worker"]["environment"]["CELERY_METRICS_PORT"] == "9540"
