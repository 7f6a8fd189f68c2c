"""The run's report: what was sent, what was told, what was broken, what was found."""

from __future__ import annotations

import json
import os
import platform
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from tools.chaos.checker import Violation
from tools.chaos.history import Event

# A violation prints at most this many of its events: enough to read, never a flood.
EVIDENCE_SHOWN = 6


@dataclass(frozen=True)
class RunFigures:
    command: str
    seed: int
    orders: int
    clients: int
    chaos_s: float
    quiesce_s: float
    parked: int  # messages a killed worker left unacknowledged (redelivered after an hour)
    restarts: dict[str, int]


def machine() -> str:
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return f"{platform.platform()}, {os.cpu_count()} CPUs, load average {load} at the end"


def report_markdown(
    figures: RunFigures, history: Iterable[Event], violations: list[Violation]
) -> str:
    events = list(history)
    requests = [e for e in events if e["type"] == "request"]
    intents = [e for e in events if e["type"] == "intent"]
    kills = Counter(e["kind"] for e in events if e["type"] == "nemesis" and "missed" not in e)
    answers = Counter(str(e.get("status") or e.get("error")) for e in requests)
    told = Counter(f"{e['op']} {e['outcome']} {e.get('status') or ''}".strip() for e in intents)
    created = len({e["number"] for e in intents if e["op"] == "create" and e["outcome"] == "ok"})
    acted = Counter(e["did"] for e in events if e["type"] == "customer-action")
    desk = Counter(
        f"{e['action']} ({'acted' if e['acted'] else 'nothing done'})"
        for e in events
        if e["type"] == "desk"
    )
    lines = [
        "# Chaos run",
        "",
        f"- command: `{figures.command}`",
        f"- machine: {machine()}",
        f"- seed {figures.seed}, {figures.orders} orders asked, {figures.clients} customers",
        f"- orders created: {created}; requests sent: {len(requests)}",
        f"- chaos phase: {figures.chaos_s:.0f} s; time to quiesce: {figures.quiesce_s:.0f} s",
        f"- messages left unacknowledged by killed workers: {figures.parked} "
        "(Redis redelivers them after its visibility timeout, RabbitMQ once the worker's "
        "connection closes; nothing waits for them)",
        f"- violations: **{len(violations)}**",
        "",
        "## Answers by status (or by the error that stood for one)",
        "",
        *_table(["answer", "requests"], sorted(answers.items())),
        "",
        "## What customers were finally told",
        "",
        *_table(["intent", "count"], sorted(told.items())),
        "",
        "## Faults injected",
        "",
        *_table(["kind", "count"], sorted(kills.items())),
        "",
        "Customers the provider waited for (`requires_action`): "
        + (", ".join(f"{did} {n}" for did, n in sorted(acted.items())) or "none"),
        "",
        "The person at the desk: "
        + (", ".join(f"{what} {n}" for what, n in sorted(desk.items())) or "no case was open"),
        "",
        "Restarts by the supervisor: "
        + (", ".join(f"{name} {n}" for name, n in sorted(figures.restarts.items())) or "none"),
        "",
        "## Violations",
        "",
    ]
    if not violations:
        lines.append("None: the history and the books agree, and `manage.py audit` is clean.")
    for violation in violations:
        lines += [f"- **{violation.rule}**: {violation.message}"]
        lines += [
            f"  - `{json.dumps(e, sort_keys=True)}`" for e in violation.evidence[:EVIDENCE_SHOWN]
        ]
    return "\n".join(lines) + "\n"


def _table(header: list[str], rows: Iterable[tuple[str, int]]) -> list[str]:
    out = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}"]
    out += [f"| {name} | {count} |" for name, count in rows]
    return out
