"""Where one request spends its time, phase by phase, without touching the app.

A ``Stopwatch`` replaces chosen functions (module or class attributes) with
timing wrappers for the duration of a block, and sums the wall time spent
inside each under a label. The pay and callback suites run requests one at a
time in the bench process under it and report mean milliseconds per phase.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any
from unittest import mock

from bench.context import Section
from bench.markdown import fmt, table


@dataclass(frozen=True)
class Probe:
    """Time every call of ``owner.attribute``, charged to ``label``.

    ``label`` may be a function of the call's arguments (e.g. which phase an
    ``atomic_phase`` call is, by the record's recovery point at entry).
    """

    owner: Any
    attribute: str
    label: str | Callable[..., str]


@dataclass
class Stopwatch:
    """Wall time spent inside probed functions, summed per label, in this process.

    The app code is untouched: the probes replace module attributes for the
    duration of a ``with stopwatch.probing(...)`` block and put them back after.
    """

    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def _timed(self, probe: Probe, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            label = probe.label if isinstance(probe.label, str) else probe.label(*args, **kwargs)
            started = perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] += perf_counter() - started

        return timed

    @contextmanager
    def probing(self, probes: Sequence[Probe]) -> Iterator[None]:
        with ExitStack() as stack:
            for probe in probes:
                original = getattr(probe.owner, probe.attribute)
                stack.enter_context(
                    mock.patch.object(probe.owner, probe.attribute, self._timed(probe, original))
                )
            yield


@dataclass(frozen=True)
class PhaseRow:
    label: str
    ms: float  # per request
    share: float  # of the whole request, 0..1


def phase_rows(
    seconds: Mapping[str, float],
    *,
    phases: Sequence[str],
    nested: Sequence[str] = (),
    remainder: str,
    total_s: float,
    iterations: int,
) -> list[PhaseRow]:
    """Mean ms per request of each phase, then what no phase covers, then details.

    ``phases`` must not overlap: their sum is taken from the total to give the
    ``remainder`` (e.g. authentication, key lookup, DRF, rendering). ``nested``
    labels lie inside one of the phases: shown ("- " prefix), never subtracted.
    """
    if iterations <= 0 or total_s <= 0:
        raise ValueError("nothing was timed")

    def row(label: str, spent: float) -> PhaseRow:
        return PhaseRow(label, spent * 1000 / iterations, spent / total_s)

    rows = [row(label, seconds.get(label, 0.0)) for label in phases]
    rows.append(row(remainder, total_s - sum(seconds.get(label, 0.0) for label in phases)))
    rows += [row(f"- {label}", seconds.get(label, 0.0)) for label in nested]
    return rows


def phase_section(title: str, intro: str, rows: Sequence[PhaseRow], total_ms: float) -> Section:
    body = table(
        ["phase", "ms/request", "%"],
        [[row.label, fmt(row.ms, 2), fmt(row.share * 100)] for row in rows]
        + [["whole request", fmt(total_ms, 2), "100.0"]],
    )
    return Section(title=title, markdown=f"{intro}\n\n{body}")


@dataclass(frozen=True)
class Timed:
    """Where ``iterations`` requests, one at a time in this process, spent their time."""

    iterations: int
    total_s: float
    seconds: dict[str, float]

    @property
    def ms_per_request(self) -> float:
        return self.total_s * 1000 / self.iterations
