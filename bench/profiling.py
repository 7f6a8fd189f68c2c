"""Profile a request in-process with pyinstrument and say where its time goes.

Two views of the same samples:

* **by layer**: each sample is charged to the first non-standard-library frame
  found walking up from the leaf, classified by package (psycopg = waiting on
  PostgreSQL, redis = the throttle counter, django/db = the ORM, ...). Time in
  ``json`` or ``socket`` is thus charged to whoever called them.
* **by step**: the share of samples inside named functions (authentication,
  key lookup, the order service, ...). Steps nest, so these do not add up.
"""

from __future__ import annotations

import sysconfig
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_STDLIB = tuple(
    path for key in ("stdlib", "platstdlib") if (path := sysconfig.get_paths().get(key))
)
# pyinstrument samples every 0.5 ms: a few thousand samples over a few hundred requests.
INTERVAL_S = 0.0005
TREE_LINES = 40
FLAT_LINES = 25

# (label, fragment of the frame's file path), first match wins.
LAYERS: Sequence[tuple[str, str]] = (
    ("PostgreSQL round trips (psycopg: send, wait, fetch)", "/psycopg"),
    ("Redis (DRF throttle counter, cache client)", "/redis/"),
    ("Django ORM (query building, SQL compiling, model instances)", "/django/db/"),
    ("DRF (request, auth/throttle/serializer machinery, rendering)", "/rest_framework/"),
    ("Django request handling (middleware, test client, http)", "/django/"),
    ("profiler overhead", "/pyinstrument/"),
    ("other libraries", "/site-packages/"),
    ("OnceShop code (idempotency/, orders/, config/)", str(ROOT)),
)


@dataclass(frozen=True)
class Step:
    """A named function whose inclusive time is worth reporting."""

    label: str
    function: str
    path_fragment: str


@dataclass(frozen=True)
class Share:
    label: str
    seconds: float
    share: float  # of all sampled time, 0..1


@dataclass(frozen=True)
class ProfileResult:
    iterations: int
    ms_per_request: float  # with the profiler's own overhead
    by_layer: list[Share]
    by_step: list[Share]
    text_path: Path


def _frame_parts(frame_info: str) -> tuple[str, str]:
    """(function, file path) of a pyinstrument frame identifier."""
    identifier = frame_info.split("\x01", 1)[0]  # drop the invocation attributes
    function, _, rest = identifier.partition("\x00")
    return function, rest.partition("\x00")[0]


def _is_stdlib(path: str) -> bool:
    if not path or path.startswith("<"):  # <built-in>, <frozen importlib._bootstrap>
        return True
    return path.startswith(_STDLIB) and "site-packages" not in path


def layer_of(stack: Sequence[str]) -> str:
    """The layer a sample is charged to: its innermost frame outside the standard library."""
    for frame_info in reversed(stack):  # leaf first
        _, path = _frame_parts(frame_info)
        if _is_stdlib(path):
            continue
        for label, fragment in LAYERS:
            if fragment in path:
                return label
        return "other"
    return "standard library"


def in_step(stack: Sequence[str], step: Step) -> bool:
    return any(
        function == step.function and step.path_fragment in path
        for function, path in map(_frame_parts, stack)
    )


def _shares(times: dict[str, float], total: float) -> list[Share]:
    ranked = sorted(times.items(), key=lambda item: item[1], reverse=True)
    return [
        Share(label=label, seconds=seconds, share=seconds / total if total else 0.0)
        for label, seconds in ranked
    ]


def attribute(
    records: Sequence[tuple[Sequence[str], float]], steps: Sequence[Step]
) -> tuple[list[Share], list[Share]]:
    """Charge sampled time (stack, seconds) to layers and to steps."""
    by_layer: defaultdict[str, float] = defaultdict(float)
    by_step: defaultdict[str, float] = defaultdict(float)
    total = 0.0
    for stack, seconds in records:
        total += seconds
        by_layer[layer_of(stack)] += seconds
        for step in steps:
            if in_step(stack, step):
                by_step[step.label] += seconds
    return _shares(by_layer, total), _shares(by_step, total)


def _without_banner(text: str) -> list[str]:
    """pyinstrument's text output minus its logo and header: the lines after "Profile at"."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Profile at"):
            return [line for line in lines[i + 1 :] if line.strip()]
    return lines


def profile(
    call: Callable[[], object], *, iterations: int, steps: Sequence[Step], out_path: Path
) -> ProfileResult:
    """Profile ``iterations`` calls as one session; write the top of it to ``out_path``."""
    from pyinstrument import Profiler

    profiler = Profiler(interval=INTERVAL_S)
    profiler.start()
    try:
        for _ in range(iterations):
            call()
    finally:
        session = profiler.stop()
    tree = profiler.output_text(unicode=False, color=False, show_all=False)
    flat = profiler.output_text(unicode=False, color=False, show_all=False, flat=True)
    out_path.write_text(
        f"# {iterations} requests, {session.duration:.2f} s sampled every {INTERVAL_S * 1000} ms\n"
        f"\n## Call tree (top {TREE_LINES} lines, library frames folded)\n\n"
        + "\n".join(_without_banner(tree)[:TREE_LINES])
        + f"\n\n## Functions by self time (top {FLAT_LINES})\n\n"
        + "\n".join(_without_banner(flat)[:FLAT_LINES])
        + "\n"
    )
    by_layer, by_step = attribute(session.frame_records, steps)
    return ProfileResult(
        iterations=iterations,
        ms_per_request=session.duration * 1000 / iterations,
        by_layer=by_layer,
        by_step=by_step,
        text_path=out_path,
    )
