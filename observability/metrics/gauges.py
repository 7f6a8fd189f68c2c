"""Gauges computed at scrape time, one line each, from the database and Redis.

Read when Prometheus scrapes (and when the books page renders), not kept
up to date by the code that changes them: the numbers are the tables' own,
never a counter that drifted. A gauge whose read fails (the database is down)
is left out of that scrape and logged; the others still answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from observability import selectors

logger = logging.getLogger(__name__)

Reading = float | None | dict[str, float]


@dataclass(frozen=True)
class GaugeSpec:
    """A gauge: its name, help, how to read it, and its one label if the read is a dict."""

    name: str
    help: str
    read: Callable[[], Reading]
    label: str = ""


# The apps add their own at start-up (``register``, from their AppConfig.ready):
# this package sits below them and never imports them.
GAUGES: list[GaugeSpec] = [
    GaugeSpec(
        "onceshop_audit_findings",
        "Findings of the last audit run (manage.py audit, the books page or beat)",
        selectors.audit_findings,
    ),
    GaugeSpec(
        "onceshop_audit_last_run_timestamp_seconds",
        "When the last audit run finished (Unix time)",
        selectors.audit_last_run,
    ),
    GaugeSpec(
        "onceshop_reconcile_last_success_timestamp_seconds",
        "When each periodic job last ran to completion (Unix time)",
        selectors.jobs_last_success,
        label="job",
    ),
]


def count_and_age_gauges(
    name: str, what: str, read: Callable[[], tuple[float, float]]
) -> tuple[GaugeSpec, GaugeSpec]:
    """``name`` (how many) and ``name_oldest_age_seconds`` from one read of both.

    ``what`` is the singular of what is counted ("refund attempt PENDING or UNKNOWN").
    The age is what the alerts bound: a count alone cannot tell a busy minute from
    one attempt stuck for a day.
    """
    return (
        GaugeSpec(name, f"How many: {what}", lambda: read()[0]),
        GaugeSpec(
            f"{name}_oldest_age_seconds",
            f"Age in seconds of the oldest {what} (0 when there is none)",
            lambda: read()[1],
        ),
    )


def register(*specs: GaugeSpec) -> None:
    """Add an app's gauges (idempotent: a second ``ready()`` adds nothing)."""
    GAUGES.extend(spec for spec in specs if spec.name not in {g.name for g in GAUGES})


@dataclass(frozen=True)
class GaugeValue:
    name: str
    help: str
    labels: dict[str, str]
    value: float


def gauge_values(specs: list[GaugeSpec] = GAUGES) -> Iterator[GaugeValue]:
    """Every gauge's current samples; a gauge that cannot be read is skipped."""
    for spec in specs:
        try:
            reading = spec.read()
        except Exception as error:  # one broken read must not empty the whole scrape
            logger.warning("gauge %s not read: %s", spec.name, type(error).__name__)
            continue
        if isinstance(reading, dict):
            for label, value in sorted(reading.items()):
                yield GaugeValue(spec.name, spec.help, {spec.label: label}, value)
        elif reading is not None:
            yield GaugeValue(spec.name, spec.help, {}, reading)


class GaugeCollector(Collector):
    """The prometheus-client side of ``GAUGES``."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families: dict[str, GaugeMetricFamily] = {}
        for sample in gauge_values():
            family = families.get(sample.name)
            if family is None:
                family = families[sample.name] = GaugeMetricFamily(
                    sample.name, sample.help, labels=list(sample.labels)
                )
            family.add_metric(list(sample.labels.values()), sample.value)
        yield from families.values()
