"""Markdown tables padded to line up, so the same text reads well on a terminal."""

from __future__ import annotations

from collections.abc import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, align: str = "") -> str:
    """A pipe table. ``align`` has one letter per column, ``l`` or ``r``; by default
    the first column is left-aligned (labels) and the others right-aligned (numbers)."""
    align = align or "l" + "r" * (len(headers) - 1)
    # At least 3 wide: a rule needs some dashes besides the alignment colon.
    widths = [
        max(3, *(len(str(cell)) for cell in column)) for column in zip(headers, *rows, strict=False)
    ]

    def line(cells: Sequence[str]) -> str:
        padded = [
            str(cell).rjust(width) if side == "r" else str(cell).ljust(width)
            for cell, width, side in zip(cells, widths, align, strict=True)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = [
        "-" * (width - 1) + ":" if side == "r" else "-" * width
        for width, side in zip(widths, align, strict=True)
    ]
    return "\n".join([line(headers), "| " + " | ".join(rule) + " |", *map(line, rows)])


def fmt(value: float, digits: int = 1) -> str:
    """A number for a table: fixed digits, ``n/a`` for NaN."""
    return "n/a" if value != value else f"{value:,.{digits}f}"  # NaN != NaN
