"""The probes and the scrape in the production profile: HTTPS redirect on, a strict
ALLOWED_HOSTS, and a load balancer or the container runtime probing plain HTTP by IP.

SECURE_SSL_REDIRECT would answer a plain-HTTP probe 301 to https (which the probe
cannot follow), and ALLOWED_HOSTS would answer 400 to a probe by IP: the probes
are answered by the first middleware, before either runs (observability/middleware.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.processes import ROOT, run_django
from tests.production.environment import production_env
from tests.production.test_deploy_files import SECRETS, render
from tools.bench.appserver import free_port

TOKEN = "scrape-token-for-the-test"
START_TIMEOUT_S = 60

PROBE_ALL = """
import json
from django.conf import settings
from django.test import Client

client = Client()
by_ip = {"HTTP_HOST": "10.0.0.7"}
answers = {
    "redirect_on": settings.SECURE_SSL_REDIRECT,
    "healthz": client.get("/healthz", **by_ip).status_code,
    "readyz": client.get("/readyz", **by_ip).status_code,
    "metrics_without_token": client.get("/metrics", **by_ip).status_code,
    "metrics_wrong_token": client.get(
        "/metrics", HTTP_AUTHORIZATION="Bearer nope", **by_ip
    ).status_code,
    "metrics_with_token": client.get(
        "/metrics", HTTP_AUTHORIZATION="Bearer %(token)s", **by_ip
    ).status_code,
    # Everything else still gets the production treatment:
    "page_over_http": client.get("/api/v1/products/", HTTP_HOST="shop.example.com").status_code,
    "page_by_ip": client.get("/api/v1/products/", secure=True, **by_ip).status_code,
}
print(json.dumps(answers))
"""


@pytest.mark.django_db(transaction=True)
def test_the_probes_answer_plain_http_by_ip_in_the_production_profile():
    result = run_django(PROBE_ALL % {"token": TOKEN}, env=production_env(METRICS_TOKEN=TOKEN))

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "redirect_on": True,
        "healthz": 200,
        "readyz": 200,
        "metrics_without_token": 401,
        "metrics_wrong_token": 401,
        "metrics_with_token": 200,
        "page_over_http": 301,
        "page_by_ip": 400,
    }


@pytest.mark.django_db(transaction=True)
def test_metrics_are_closed_in_production_without_a_token():
    result = run_django(PROBE_ALL % {"token": ""}, env=production_env(METRICS_TOKEN=""))

    assert result.returncode == 0, result.stderr
    answers = json.loads(result.stdout.splitlines()[-1])
    assert answers["metrics_without_token"] == 401
    assert answers["metrics_with_token"] == 401  # "Bearer " with nothing: still closed


# --- The image's and the compose files' own health checks, run for real -------------


def _dockerfile_json(instruction: str) -> list[str]:
    """The exec-form array of a Dockerfile instruction (continuation lines joined)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith(instruction))
    return json.loads(line[line.index("[") :])


def _on_port(argv: list[str], port: int) -> list[str]:
    """A health check's command, aimed at the test server's port instead of 8000."""
    return [arg.replace("127.0.0.1:8000", f"127.0.0.1:{port}") for arg in argv]


def _check_passes(test: list[str], port: int) -> subprocess.CompletedProcess[str]:
    assert test[0] == "CMD", test
    argv = _on_port(test[1:], port)
    assert argv[0] == "python"
    return subprocess.run(
        [sys.executable, *argv[1:]], capture_output=True, text=True, timeout=30, check=False
    )


def _wait_answering(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"gunicorn exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2, allow_redirects=False)
            return
        except requests.RequestException:
            time.sleep(0.2)  # not listening yet
    raise AssertionError("gunicorn did not answer")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_image_and_compose_health_checks_pass_against_a_production_gunicorn(tmp_path):
    # Given the image's own server command, in the production profile, on a test port
    port = free_port()
    command = [arg.replace("0.0.0.0:8000", f"127.0.0.1:{port}") for arg in _dockerfile_json("CMD")]
    env = production_env(PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"))
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as out:
        gunicorn = [str(Path(sys.executable).parent / command[0]), *command[1:]]
        process = subprocess.Popen(gunicorn, cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        _wait_answering(port, process, log)

        # When the image's HEALTHCHECK and the compose files' web checks run against it
        checks: dict[str, Any] = {"image": ["CMD", *_dockerfile_json("HEALTHCHECK")]}
        prod = render("docker-compose.prod.yml", {name: "x" for name in SECRETS})
        checks["compose.prod web"] = prod["services"]["web"]["healthcheck"]["test"]
        checks["compose web"] = render("docker-compose.yml", {})["services"]["web"]["healthcheck"][
            "test"
        ]
        results = {name: _check_passes(test, port) for name, test in checks.items()}

        # Then every one of them passes (no 301 to https, no 400 for the Host)
        assert {name: r.returncode for name, r in results.items()} == dict.fromkeys(checks, 0), {
            name: r.stderr[-500:] for name, r in results.items()
        }
        # ... while the shop itself still redirects plain HTTP
        page = requests.get(
            f"http://127.0.0.1:{port}/api/v1/products/",
            headers={"Host": "shop.example.com"},
            allow_redirects=False,
            timeout=10,
        )
        assert page.status_code == 301
        assert page.headers["Location"].startswith("https://shop.example.com/")
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_every_long_running_service_has_a_health_check_on_its_probe():
    prod = render("docker-compose.prod.yml", {name: "x" for name in SECRETS})["services"]
    demo = render("docker-compose.yml", {})["services"]
    image_check = " ".join(_dockerfile_json("HEALTHCHECK"))

    assert "/healthz" in image_check  # liveness: the process, not its dependencies
    for services in (prod, demo):
        assert "/readyz" in " ".join(services["web"]["healthcheck"]["test"])
        worker = services["worker"]
        port = worker["environment"]["CELERY_METRICS_PORT"]
        assert f"127.0.0.1:{port}/healthz" in " ".join(worker["healthcheck"]["test"])
        assert services["beat"]["healthcheck"] == {"disable": True}
        command = services["web"]["command"]
        assert "python:config.gunicorn" in (
            command if isinstance(command, str) else " ".join(command)
        )
    assert prod["migrate"]["healthcheck"] == {"disable": True}
    assert re.search(r"/readyz", " ".join(demo["provider"]["healthcheck"]["test"]))
