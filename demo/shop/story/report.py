"""What the story reports: its steps in time order, the tally and the audit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from demo.shop.answers import Answer


class StoryUnavailable(Exception):
    """The story cannot run (shop unreachable, not seeded, ...); the message says why."""


class StoryRunning(StoryUnavailable):
    """Another story is running: one at a time, since each scripts the provider's faults."""


@dataclass(frozen=True)
class StoryStep:
    actor: str
    action: str
    request: str
    answer: Answer | None  # set for the requests that carry an Idempotency-Key
    result: str
    why: str  # the story's reason; the answer's own explanation is ``answer.why``
    at_s: float  # seconds after the story started, when it happened

    @property
    def explanation(self) -> str:
        if self.answer is None or self.answer.why in self.why:
            return self.why
        return f"{self.why} {self.answer.why}".strip()


@dataclass(frozen=True)
class TallyRow:
    """One line of the books: how many (or, with a currency, how much) against what
    the story expects. An amount is in minor units, shown as money."""

    what: str
    count: int
    expected: int
    currency: str = ""

    @property
    def ok(self) -> bool:
        return self.count == self.expected


@dataclass
class StoryReport:
    customer: str
    order_number: str = ""
    steps: list[StoryStep] = field(default_factory=list)
    settled_by: str = ""  # who settled the payment, in words (observe.Settler)
    tally: list[TallyRow] = field(default_factory=list)
    audit: Any | None = None
    audit_note: str = ""

    @property
    def ok(self) -> bool:
        audit_ok = self.audit is None or bool(getattr(self.audit, "ok", False))
        return bool(self.tally) and all(row.ok for row in self.tally) and audit_ok
