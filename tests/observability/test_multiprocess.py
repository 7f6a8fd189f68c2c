"""Multiprocess metrics: every gunicorn worker and every Celery pool process counts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from orders.tasks import fulfil_order
from tests.observability.conftest import METRICS_TOKEN, parse_samples, value
from tests.processes import ROOT, child_database_url
from tests.workers import Worker, start_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

START_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(url: str, token: str | None = METRICS_TOKEN) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = requests.get(url, headers=headers, timeout=5)
    return response.status_code, response.text


def wait_until(condition: Any, *, what: str, timeout: float = START_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if result := condition():
                return result
        except requests.RequestException:
            pass  # not listening yet
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def metered_worker(django_db_setup: Any, tmp_path_factory: Any) -> Iterator[tuple[Worker, str]]:
    """A Celery worker (prefork) with its own multiprocess directory and metrics port."""
    port = free_port()
    env = {
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path_factory.mktemp("worker-metrics")),
        "CELERY_METRICS_PORT": str(port),
        "METRICS_TOKEN": METRICS_TOKEN,
    }
    for worker in start_worker(env):
        yield worker, f"http://127.0.0.1:{port}"


def test_a_celery_workers_tasks_are_served_on_its_metrics_port(metered_worker, order):
    worker, base = metered_worker
    name = "onceshop_celery_tasks_total"
    labels = {"task": "orders.tasks.fulfil_order", "state": "SUCCESS"}
    status, text = wait_until(lambda: get(f"{base}/metrics"), what="the worker's metrics")
    before = value(parse_samples(text), name, **labels)

    fulfil_order.delay(order.pk)  # runs in a pool process, served by the main process
    worker.wait_for(worker.idle, what="the task")

    _, text = get(f"{base}/metrics")
    assert status == 200
    assert value(parse_samples(text), name, **labels) == before + 1
    assert get(f"{base}/metrics", token=None)[0] == 401
    assert get(f"{base}/healthz", token=None) == (200, '{"status": "ok"}')


@pytest.fixture
def gunicorn(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The shop under gunicorn with two workers and the project's gunicorn settings."""
    port, metrics_dir = free_port(), tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_99999999.db").write_bytes(b"")  # a previous run's leftover
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "gunicorn", "config.wsgi:application"),
            *("--config", "python:config.gunicorn", "--bind", f"127.0.0.1:{port}"),
            *("--workers", "2", "--worker-class", "gthread", "--threads", "2"),
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": child_database_url(),
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
            "METRICS_TOKEN": METRICS_TOKEN,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # Its own session, as make demo starts it: no signal gunicorn sends or gets
        # for its group can reach the test runner.
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: get(f"{base}/healthz")[0] == 200, what="gunicorn to start")
        yield base, metrics_dir
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_every_gunicorn_worker_counts_in_one_scrape(gunicorn):
    base, metrics_dir = gunicorn
    assert not (metrics_dir / "counter_99999999.db").exists()  # emptied at start

    # Requests until both workers have answered some (the kernel picks the worker)
    sent = 0

    def both_workers_answered() -> bool:
        nonlocal sent
        assert get(f"{base}/api/v1/products/", token=None)[0] == 200
        sent += 1
        return len({path.stem.rsplit("_", 1)[1] for path in metrics_dir.glob("*.db")}) >= 2

    wait_until(both_workers_answered, what="both workers to answer")

    _, text = get(f"{base}/metrics")
    labels = {"route": "product-list", "method": "GET", "status": "200"}
    assert value(parse_samples(text), "onceshop_http_requests_total", **labels) == sent
