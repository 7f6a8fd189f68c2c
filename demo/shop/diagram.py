"""The order state machine, drawn from the model's own django-fsm transitions.

Nothing here names a state or a transition: they are read from
``Order.status``'s declared transitions at request time, so the picture cannot
drift from the code. The layout is deliberately simple and deterministic:
states in columns by their distance from the initial state, one row each, and
an SVG arrow per (source, transition, target). The same transitions are also
listed as a table, the accessible form of the picture.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from django_fsm import ANY_OTHER_STATE, ANY_STATE

from orders.models import Order

BOX_W, BOX_H = 150, 48
ROW_GAP = 36
MARGIN = 24
# A transition's label sits beside the arrow's last stretch, ending before the
# arrowhead: the gap between columns is as wide as the longest label needs. The
# labels are 13 px monospace (site.css), whose characters are 0.6 em wide; 8 px
# keeps a wider fallback font inside the gap too.
LABEL_CHAR_W = 8
ARROWHEAD = 12  # the marker's 8 units x the edge's 1.5 px stroke
LABEL_PAD = 8  # between a label and the arrowhead, and the source box
MIN_COL_GAP = 130
LANE = BOX_H / 4  # how far from the middle two opposite arrows between one pair run


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    name: str
    # SVG path and label position, precomputed so the template only prints numbers.
    path: str
    label_x: float
    label_y: float


@dataclass(frozen=True)
class Box:
    state: str
    x: int
    y: int
    initial: bool
    final: bool

    @property
    def cx(self) -> float:
        return self.x + BOX_W / 2

    @property
    def cy(self) -> float:
        return self.y + BOX_H / 2


@dataclass(frozen=True)
class StateMachine:
    boxes: list[Box]
    arrows: list[Arrow]
    width: int
    height: int
    box_w: int = BOX_W
    box_h: int = BOX_H

    @property
    def initial(self) -> str:
        return next((box.state for box in self.boxes if box.initial), "")

    @property
    def finals(self) -> list[str]:
        return [box.state for box in self.boxes if box.final]


def _targets(target: Any) -> list[str]:
    """A plain target state, or the allowed states of a computed one (RETURN_VALUE)."""
    if isinstance(target, str):
        return [target]
    return [str(state) for state in getattr(target, "allowed_states", None) or []]


def _edges(model: type[Order]) -> list[tuple[str, str, str]]:
    field = model._meta.get_field("status")
    states = [str(value) for value, _label in field.choices or []]
    edges: list[tuple[str, str, str]] = []
    for transition in field.get_all_transitions(model):
        for target in _targets(transition.target):
            # "*" is any state, "+" any state but the target (django-fsm's wildcards).
            if transition.source == ANY_STATE:
                sources = states
            elif transition.source == ANY_OTHER_STATE:
                sources = [state for state in states if state != target]
            else:
                sources = [str(transition.source)]
            edges.extend((source, transition.name, target) for source in sources)
    return sorted(set(edges), key=lambda edge: (states.index(edge[0]), edge[1], edge[2]))


def order_state_machine(model: type[Order] = Order) -> StateMachine:
    field = model._meta.get_field("status")
    states = [str(value) for value, _label in field.choices or []]
    initial = str(field.default)
    edges = _edges(model)

    # Column = shortest number of transitions from the initial state (breadth first).
    depth = {initial: 0}
    queue = deque([initial])
    while queue:
        state = queue.popleft()
        for source, _name, target in edges:
            if source == state and target not in depth:
                depth[target] = depth[state] + 1
                queue.append(target)
    last = max(depth.values(), default=0)
    for state in states:  # unreachable states still get a place, in a last column
        depth.setdefault(state, last + 1)

    col_gap = max(
        [MIN_COL_GAP] + [_label_width(name) + ARROWHEAD + 2 * LABEL_PAD for _s, name, _t in edges]
    )
    rows: dict[int, int] = {}
    boxes: dict[str, Box] = {}
    sources = {source for source, _name, _target in edges}
    for state in states:
        column = depth[state]
        row = rows.get(column, 0)
        rows[column] = row + 1
        boxes[state] = Box(
            state=state,
            x=MARGIN + column * (BOX_W + col_gap),
            y=MARGIN + row * (BOX_H + ROW_GAP),
            initial=state == initial,
            final=state not in sources,
        )

    pairs = {(source, target) for source, _name, target in edges}
    arrows = [
        _arrow(boxes[s], boxes[t], name, both_ways=s != t and (t, s) in pairs)
        for s, name, t in edges
    ]
    width = MARGIN * 2 + (max(depth.values()) + 1) * (BOX_W + col_gap) - col_gap
    height = MARGIN * 2 + max(rows.values()) * (BOX_H + ROW_GAP) - ROW_GAP
    return StateMachine(boxes=list(boxes.values()), arrows=arrows, width=width, height=height)


def _label_width(name: str) -> int:
    return len(f"{name}()") * LABEL_CHAR_W


def _arrow(source: Box, target: Box, name: str, both_ways: bool = False) -> Arrow:
    if source.state == target.state:  # a self-loop above the box
        x, y = source.cx, source.y
        path = f"M {x - 20} {y} C {x - 40} {y - 40}, {x + 40} {y - 40}, {x + 20} {y}"
        return Arrow(source.state, target.state, name, path, x, y - 34)
    forward = target.x > source.x
    x1 = source.x + BOX_W if forward else source.x
    x2 = target.x if forward else target.x + BOX_W
    y1, y2 = source.cy, target.cy
    if both_ways:
        # Two states joined both ways (a refund and its reversal): the forward arrow
        # runs in the boxes' upper half with its label above, the way back in the
        # lower half with its label below, so neither crosses the other.
        lane = -LANE if forward else LANE
        y1, y2 = y1 + lane, y2 + lane
    # A gentle S-curve: horizontal at both ends, so arrows to stacked targets fan out.
    mid = (x1 + x2) / 2
    path = f"M {x1} {y1} C {mid} {y1}, {mid} {y2}, {x2} {y2}"
    # The label is centred on the arrow's last, horizontal stretch, short of the
    # arrowhead, so arrows from one state to stacked targets keep their labels
    # apart. It sits on the side the curve does not come from: above an arrow that
    # runs level or climbs, below one that comes down (the curve is above it there).
    span = _label_width(name) / 2 + LABEL_PAD + ARROWHEAD
    label_x = x2 - span if forward else x2 + span
    below = y2 > y1 or (both_ways and not forward)
    label_y = y2 + 18 if below else y2 - 8
    return Arrow(source.state, target.state, name, path, label_x, label_y)
