"""Fixtures of the operations tests: a scrape of /metrics, and logs captured as JSON."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from observability.logs import ContextFilter, JsonFormatter

METRICS_TOKEN = "test-metrics-token"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_samples(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def scrape(settings: Any) -> Callable[[], Samples]:
    """GET /metrics as Prometheus would (with the bearer token), parsed into samples."""
    settings.METRICS_TOKEN = METRICS_TOKEN

    def get() -> Samples:
        response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
        assert response.status_code == 200, response.content
        return parse_samples(response.content.decode())

    return get


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 when the series does not exist yet (a counter never moved)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def json_logs() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """Every record this process logs (the live server's threads too), as the production
    handler writes it: the same context filter and JSON formatter. Yields a reader."""
    handler = _Lines()
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in handler.lines]
    finally:
        root.removeHandler(handler)
